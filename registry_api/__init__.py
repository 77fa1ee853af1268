"""The registry: the job document, the HTTP API and the Kafka registration intake, runs on
demand (trigger, backfill, replay), and the operators' home (ops/)."""
