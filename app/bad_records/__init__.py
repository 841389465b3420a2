"""Bad records once found: what a pipeline does with them (its error policy) and the dead-letter topic.

Owns the error policy and the handler that applies it to a txid's bad records (:mod:`.error_policy`: fail,
skip, dead letter) and the dead-letter writer (:mod:`.dead_letters`). The bad record itself is
:mod:`spouts.bad_records`; finding a txid's bad records on Spark is :mod:`app.spark.bad_record_finding`.

May import :mod:`app.metrics` and what lies below it (``app/__init__.py`` lists the layers).
"""
