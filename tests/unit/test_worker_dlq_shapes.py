"""What a worker puts on runs.dlq: dead letters naming the worker, unreadable deliveries with
their exact bytes; and `tickwheel worker` refusing a bad --handlers in one line."""

from __future__ import annotations

import base64

import orjson
import pytest
from click.testing import CliRunner

from tickwheel.cli import main
from tickwheel.envelopes.dead_letters import DeadLetter, UnreadableRun
from tickwheel.envelopes.parsing import EnvelopeError
from tickwheel.envelopes.run import RunEnvelope

pytestmark = pytest.mark.unit

RUN = RunEnvelope(
    run_key="acme/inv@1000",
    tenant="acme",
    job_id="inv",
    scheduled_at=1000,
    attempt=3,
    epoch=1,
    priority="low",
    payload={},
    timeout_ms=1000,
    handler="billing.send",
)


def test_dead_letter_carries_the_worker() -> None:
    """a worker's dead letter names the worker; one without a worker omits the field"""
    letter = DeadLetter(run=RUN, error="boom", attempts=3, dead_at=5, worker="w-1")
    assert orjson.loads(letter.encode())["worker"] == "w-1"
    assert DeadLetter.decode(letter.encode()) == letter
    anonymous = DeadLetter(run=RUN, error="boom", attempts=3, dead_at=5)
    assert "worker" not in orjson.loads(anonymous.encode())


def test_unreadable_run_keeps_exact_bytes_and_source() -> None:
    """the original bytes survive base64; kind tells it from a dead letter"""
    raw = b"\xff\x00 not an envelope"
    record = UnreadableRun("value is not JSON", "p.runs.high", 1, 42, raw, "w-1", 7)
    body = orjson.loads(record.encode())
    assert body["kind"] == "unreadable" and base64.b64decode(body["original"]) == raw
    assert body["source"] == {"topic": "p.runs.high", "partition": 1, "offset": 42}
    assert UnreadableRun.decode(record.encode()) == record
    with pytest.raises(EnvelopeError):
        DeadLetter.decode(record.encode())


def test_worker_refuses_unimportable_handlers_module() -> None:
    """--handlers naming a missing module: exit 2 and one line naming it"""
    result = CliRunner().invoke(main, ["worker", "--handlers", "no_such_module_q"])
    assert result.exit_code == 2
    assert "cannot import 'no_such_module_q'" in result.output
    assert "Traceback" not in result.output
