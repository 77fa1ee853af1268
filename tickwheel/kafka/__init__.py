"""Kafka plumbing: idempotent producers, offset-storing consumers, topic creation.

Delivery contract used everywhere (DESIGN I5): consumers run with `enable.auto.offset.store`
off and auto-commit on. Code stores an offset (`store_offsets`) only after the message's
database write landed; the client commits stored offsets in the background. Offsets are thus
never committed per message synchronously, and never ahead of the database.

Every client logs through Python logging (logger `tickwheel.librdkafka`, JSON lines in our
processes) rather than librdkafka writing `%4|…|` lines to stderr on its own.

    clients.py     the producer, consumer and admin client every process makes, configured
                   for that contract; `QUIET` for a probe's clients
    admin.py       what is asked of the broker directly: topics created and deleted, the
                   health probe's `round_trip`, a group's `topic_offsets` and `group_members`
    consuming.py   `BatchConsumer`: batches in on one I/O thread, offsets stored explicitly,
                   rewind after a failed write
    offsets.py     `ContiguousOffsets`: the committable position per partition when messages
                   finish out of order
    producing.py   `publish_confirmed` (produce, wait for the acks) and `publish_reports` (reports
                   of other messages, built to fit one message)
"""
