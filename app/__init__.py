"""The service: command line, configuration, batch coordinator, Spark plumbing and metrics."""
