"""Auditing a pipeline: recount the committed source ranges and compare them with the stored table as of a txid.

:mod:`app.audit.ranges` chooses the ranges (and refuses what cannot be audited), :mod:`app.audit.source`
reads them with a consumer of its own, :mod:`app.audit.recount` transforms and aggregates them with Spark's
built-in functions (never the pipeline's read tasks, pruning or combine), :mod:`app.audit.compare` compares
key by key, and :mod:`app.audit.run` ties them together for ``python -m app audit``.

May import :mod:`app.config` and what lies below it (``app/__init__.py`` lists the layers); never
:mod:`app.service` or :mod:`app.commands`.
"""
