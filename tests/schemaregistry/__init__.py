"""A Schema Registry test peer (:mod:`.server`) and its fixtures (:mod:`.fixtures`)."""
