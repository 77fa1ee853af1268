"""Job registry: HTTP API and Kafka registration intake (later issues)."""
