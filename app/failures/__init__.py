"""The service's error vocabulary: which failures are permanent, transient or bad input, decided in one place.

Owns the errors the service raises itself (:mod:`.errors`), an error's chain of causes (:mod:`.causes`), an
error told on one line (:mod:`.error_text`), refusals by a server (:mod:`.refusals`), Spark's errors read
through their accessors (:mod:`.spark_errors`), fatal state errors carried out of Spark tasks
(:mod:`.spark_fatal`) and the failure policy that turns a failed step into a decision (:mod:`.policy`).

The bottom layer of ``app``: imports only ``spouts``, ``states`` and libraries, never another part of ``app``.
"""
