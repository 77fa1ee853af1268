"""The shapes on the wire, written once: what the registry accepts and answers over HTTP, and what
travels on the Kafka topics (DESIGN §5, §7).

Ground code: imported by the registry (which validates with these models and describes its
OpenAPI document with them), by `tickwheel.client` (which speaks them), and by the schema
generator that writes `docs/schemas/`. Nothing here imports an area (`registry_api`, `shards`,
`workers`, `wheel`); checks that need context (zones, the target allowlist, the payload limit)
stay in the registry.

    job.py        the job document (`JobDocument` and its parts), its bounds
    responses.py  the HTTP API's answers: jobs, runs, pages, accepted triggers and backfills,
                  the schedule preview, health, and the two error bodies
    messages.py   the Kafka messages as JSON Schema models: registration (every op), rejection,
                  run envelope, dead letter (`tickwheel.envelopes` holds the codecs)
    schemas.py    `python -m tickwheel.wire.schemas`: writes or checks `docs/schemas/`
"""
