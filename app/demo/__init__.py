"""``python -m app demo``: a word count checked against its input, on Spark over an in-process Kafka into
SQLite (:mod:`.spark`) or in memory through the coordinator into an OpaqueMap (:mod:`.memory`).

May import :mod:`app.audit` and what lies below it (``app/__init__.py`` lists the layers); never
:mod:`app.commands` or :mod:`app.service`.
"""
