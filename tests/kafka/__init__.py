"""Kafka spout tests, the Kafka test peers (librdkafka's mock cluster, real Kafka) and the read-rate benchmark."""
