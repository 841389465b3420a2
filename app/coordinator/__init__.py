"""The batch coordinator: plans txids, overlaps their processing, commits them strictly in order.

Owns the coordinator (:mod:`.coordinator`), its lease (:mod:`.lease`, :mod:`.lease_hold`) and the store
it writes through under it (:mod:`.fenced`), the txids in flight (:mod:`.inflight`), what a plan says
before it runs (:mod:`.planning`), phase timing (:mod:`.phases`), failures in a row (:mod:`.failure_streak`),
its documents in the transactional-state store (:mod:`.progress`) and the loop that drives it (:mod:`.loop`).

May import :mod:`app.spark` and what lies below it (``app/__init__.py`` lists the layers); never
:mod:`app.config`, :mod:`app.service` or :mod:`app.commands`. Its log lines are under ``app.coordinator``.
"""
