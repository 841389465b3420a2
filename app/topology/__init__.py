"""What a pipeline computes, as plain Python objects: the topology API and the batch protocol it runs by.

Owns the topology API (:mod:`.topology`: a stream from a spout, transforms, persistent aggregates), its
steps (:mod:`.steps`), latest-value upserts (:mod:`.upserts`), which spout x state combinations are
exactly-once (:mod:`.guarantees`), a batch in flight and the executor protocol (:mod:`.batch`), an
in-process executor (:mod:`.local`) and a state table's key typed from text (:mod:`.key_text`).

May import :mod:`app.bad_records` and what lies below it (``app/__init__.py`` lists the layers).
"""
