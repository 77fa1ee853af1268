"""The Kafka message shapes of DESIGN §5, encoded as JSON with orjson.

Every run envelope carries `"v": 1`; a decoder refuses versions it does not know and any
missing or mistyped field with an `EnvelopeError` naming the field, so a consumer can route the
message (dead-letter, rejection topic) instead of crashing on it. A run envelope's identity and
numbers must also be values the run ledger can hold (the tenant and job id forms, instants of
the years 1900-8999, attempts within an int32): a message naming anything else is refused
here, never by Postgres in the middle of a worker's batch claim.

What a consumer writes back about a message it could not use (a rejection, an unreadable run,
a dead letter) always fits in one Kafka message: `fitted` cuts the quoted original (keeping its
size and SHA-256) and the free text, so a huge message cannot make its own report unsendable.

    parsing.py        strict JSON in (`loads_exact`: integers of any size kept exact), the
                      field checks every decoder makes, and `EnvelopeError`
    run.py            the run envelope of `runs.<priority>` (`RunEnvelope`; `encode_run`, a
                      leader's encoding of a claimed row), its headers and its run key
    dead_letters.py   what `runs.dlq` holds: `DeadLetter` (a run whose attempts are over) and
                      `UnreadableRun` (a message on a run topic that is no run envelope)
    registrations.py  `Registration` (`registrations`) and `Rejection` (`registrations.rejected`)
    reports.py        what every report of another message shares: its free text cut
                      (`cut_text`), the quoted original fitted beside it in one message
"""
