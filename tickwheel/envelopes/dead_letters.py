"""What `runs.dlq` holds (DESIGN §5): `DeadLetter`, a run whose attempts are over (or that
failed permanently), and `UnreadableRun`, a message on a run topic that is no run envelope.
Each is built to fit one message (`fitted`).
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Any

import orjson

from tickwheel.envelopes.parsing import EnvelopeError, loads_object, take
from tickwheel.envelopes.reports import cut_text, fit_original, quote_original, unquote_original
from tickwheel.envelopes.run import RunEnvelope


@dataclass(frozen=True)
class DeadLetter:
    """A run that exhausted its attempts (or failed permanently), for `runs.dlq`.

    `payload_omitted` is set (`{"size", "sha256"}` of the payload's JSON) when the payload
    was left out so that the letter fits one message (`fitted`); the job's row keeps it.
    """

    run: RunEnvelope
    error: str
    attempts: int
    dead_at: int  # unix milliseconds, UTC
    worker: str | None = None  # the worker that recorded the last attempt, when one did
    payload_omitted: dict[str, Any] | None = None

    def encode(self) -> bytes:
        body = {
            **self.run.to_dict(),
            "error": self.error,
            "attempts": self.attempts,
            "dead_at": self.dead_at,
        }
        if self.worker is not None:
            body["worker"] = self.worker
        if self.payload_omitted is not None:
            body["payload_omitted"] = self.payload_omitted
        return orjson.dumps(body)

    def fitted(self, max_bytes: int) -> DeadLetter:
        """This letter with its error cut to TEXT_MAX_CHARS and, if it still does not fit in
        `max_bytes`, without its payload (size and digest kept)."""
        letter = dataclasses.replace(self, error=cut_text(self.error))
        if len(letter.encode()) <= max_bytes:
            return letter
        payload = orjson.dumps(self.run.payload)
        letter = dataclasses.replace(
            letter,
            run=self.run._replace(payload=None),
            payload_omitted={"size": len(payload), "sha256": hashlib.sha256(payload).hexdigest()},
        )
        if len(letter.encode()) > max_bytes:
            raise ValueError(f"a dead letter cannot fit in {max_bytes} bytes")
        return letter

    @classmethod
    def decode(cls, raw: bytes) -> DeadLetter:
        obj = loads_object(raw)
        return cls(
            run=RunEnvelope.from_dict(obj),
            error=take(obj, "error", str),
            attempts=take(obj, "attempts", int),
            dead_at=take(obj, "dead_at", int),
            worker=take(obj, "worker", str, optional=True),
            payload_omitted=take(obj, "payload_omitted", dict, optional=True),
        )


@dataclass(frozen=True)
class UnreadableRun:
    """A message on a run topic that is no run envelope, as a worker puts it on `runs.dlq`.

    `{"kind": "unreadable", "error": reason, "source": {"topic", "partition", "offset"},
    "original": <base64 of the exact bytes>, "worker": id, "dead_at": unix ms}`: no run fields,
    since none could be trusted; `kind` tells it apart from a `DeadLetter`. As on the rejected
    topic, an original too large to quote whole beside the rest is cut (`fitted`):
    `"truncated": true`, `original_size` and `original_sha256` then describe the whole message.
    """

    error: str
    topic: str
    partition: int
    offset: int
    original: bytes = field(repr=False)
    worker: str = ""
    dead_at: int = 0  # unix milliseconds, UTC
    original_size: int | None = None  # bytes of the whole message; set when truncated
    original_sha256: str | None = None  # hex SHA-256 of the whole message; set when truncated
    truncated: bool = False

    KIND = "unreadable"

    def fitted(self, max_bytes: int) -> UnreadableRun:
        """This record, its reason cut to TEXT_MAX_CHARS and its original cut (with size and
        digest) if need be, so that its encoding is at most `max_bytes`."""
        error = cut_text(self.error)
        return fit_original(
            lambda original, size, digest: dataclasses.replace(
                self,
                error=error,
                original=original,
                original_size=size,
                original_sha256=digest,
                truncated=size is not None,
            ),
            self.original,
            max_bytes,
        )

    def encode(self) -> bytes:
        body: dict[str, Any] = {
            "kind": self.KIND,
            "error": self.error,
            "source": {"topic": self.topic, "partition": self.partition, "offset": self.offset},
            "worker": self.worker,
            "dead_at": self.dead_at,
        }
        quote_original(body, self.original, self.original_size, self.original_sha256)
        return orjson.dumps(body)

    @classmethod
    def decode(cls, raw: bytes) -> UnreadableRun:
        obj = loads_object(raw)
        if obj.get("kind") != cls.KIND:
            raise EnvelopeError(f"field 'kind' must be {cls.KIND!r}")
        source = take(obj, "source", dict)
        original, size, digest, truncated = unquote_original(obj)
        return cls(
            error=take(obj, "error", str),
            topic=take(source, "topic", str),
            partition=take(source, "partition", int),
            offset=take(source, "offset", int),
            original=original,
            worker=take(obj, "worker", str),
            dead_at=take(obj, "dead_at", int),
            original_size=size,
            original_sha256=digest,
            truncated=truncated,
        )
