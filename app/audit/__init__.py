"""Auditing a pipeline: recount the committed source ranges and compare them with the stored table as of a txid.

:mod:`app.audit.ranges` chooses the ranges (and refuses what cannot be audited), :mod:`app.spark.recount`
counts them through the pipeline's own plan, :mod:`app.audit.compare` compares key by key, and
:mod:`app.audit.run` ties them together for ``python -m app audit``.
"""
