"""Run envelopes fuzzed with hypothesis and delivered to a real worker: every message that is
not a valid envelope is dead-lettered with a reason and its bytes, nothing but the one real run
is executed, and the worker keeps going (it exits 0 at the end of each example)."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tickwheel import handler
from tickwheel.envelopes.dead_letters import UnreadableRun
from tickwheel.envelopes.parsing import EnvelopeError
from tickwheel.envelopes.run import RunEnvelope
from tickwheel.kafka.producing import PRODUCER_MESSAGE_MAX_BYTES
from tickwheel.stack import Addresses
from tickwheel.testing import produce
from tickwheel.topics import Topics
from tickwheel.workers.handlers import Context

from .test_workers import (
    RunSpec,
    create_runs,
    drain_values,
    publish,
    running_worker,
    statuses_are,
    wait_for,
    worker_settings,
)

pytestmark = pytest.mark.integration

executed_keys: list[str] = []
MESSAGES_PER_EXAMPLE = 20

# Integers within what orjson writes (64 bits); larger ones are written by hand below. The
# edges of what the run ledger holds (int32 attempts, int64 instants) are drawn on purpose.
EDGES = [0, -1, 1, 2**31 - 1, 2**31, 2**62, 2**63 - 1, -(2**63), 253402300800000, -2208988800001]
json_ints = st.integers(min_value=-(2**63), max_value=2**64 - 1) | st.sampled_from(EDGES)
huge_ints = st.integers(min_value=2**64, max_value=2**200) | st.integers(max_value=-(2**63) - 1)
# Text with what Postgres's text cannot hold (NUL) or what no identity allows.
hostile_text = st.text(max_size=20) | st.sampled_from(["a\x00b", "\x00", "x" * 200, "a/b@1"])
json_values = st.recursive(
    st.none() | st.booleans() | json_ints | st.floats(allow_nan=False) | hostile_text,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def _digest(letter: UnreadableRun) -> str:
    """The SHA-256 of the message a letter reports: given when it was cut, else computed."""
    return letter.original_sha256 or hashlib.sha256(letter.original).hexdigest()


@handler("fuzz.record")
async def record(ctx: Context, _payload: Any) -> None:
    executed_keys.append(ctx.run_key)


def _mutations(valid: dict[str, Any]) -> st.SearchStrategy[bytes]:
    """A valid envelope with one field replaced, removed or added, or bytes that are not one."""
    fields = sorted(valid)
    replaced = st.tuples(st.sampled_from(fields), json_values).map(
        lambda fv: orjson.dumps({**valid, fv[0]: fv[1]})
    )
    removed = st.sampled_from(fields).map(
        lambda f: orjson.dumps({k: v for k, v in valid.items() if k != f})
    )
    added = st.tuples(st.text(min_size=1, max_size=10), json_values).map(
        lambda kv: orjson.dumps({**valid, kv[0]: kv[1]})
    )
    # orjson cannot write an integer beyond 64 bits: put one in by hand.
    huge = st.tuples(st.sampled_from(fields), huge_ints).map(
        lambda fv: orjson.dumps({**valid, fv[0]: 0}).replace(
            f'"{fv[0]}":0'.encode(), f'"{fv[0]}":{fv[1]}'.encode(), 1
        )
    )
    # Now and then a message of hundreds of kilobytes: its dead letter must still fit one message.
    oversize = st.sampled_from([b"G" * 700_000, orjson.dumps({**valid, "payload": "p" * 600_000})])
    return st.one_of(
        replaced,
        removed,
        added,
        huge,
        st.binary(max_size=64),
        json_values.map(orjson.dumps),
        oversize,
    )


@pytest.mark.foreign_messages("runs.normal")  # the fuzzed envelopes
@settings(
    max_examples=4,
    # No shrinking: each example runs a worker on the real stack; a failure is reported as drawn.
    phases=[Phase.generate],
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_fuzzed_envelopes_are_dead_lettered_never_executed(
    data: st.DataObject, stack: Addresses, db_dsn: str, topics: Topics
) -> None:
    """malformed or forged envelopes next to a real run: the real run succeeds once, each bad
    message is on the DLQ with its bytes and a reason, no fuzzed envelope is executed"""
    tenant = f"f{uuid.uuid4().hex[:10]}"
    real = RunSpec("real", handler="fuzz.record")
    valid = orjson.loads(RunSpec("ghost", handler="fuzz.record").envelope(tenant).encode())
    messages = data.draw(st.lists(_mutations(valid), min_size=1, max_size=MESSAGES_PER_EXAMPLE))
    unreadable = []
    for raw in messages:
        try:
            RunEnvelope.decode(raw)
        except EnvelopeError:
            unreadable.append(raw)
    executed_keys.clear()

    async def all_dead_lettered() -> bool:
        # Messages land on several partitions: the real run may finish before the worker has
        # read every bad one, so wait for the letters themselves before stopping the worker.
        values = await asyncio.to_thread(drain_values, stack.kafka, topics.dlq, 0)
        found = {_digest(UnreadableRun.decode(v)) for v in values if b'"kind"' in v}
        return all(hashlib.sha256(raw).hexdigest() in found for raw in unreadable)

    async def scenario() -> list[bytes]:
        await create_runs(db_dsn, tenant, [real])
        produce(stack.kafka, topics.runs("normal"), [(None, m) for m in messages])
        publish(stack.kafka, topics, tenant, [real])
        async with running_worker(worker_settings(stack, db_dsn, topics)):
            await wait_for(lambda: statuses_are(db_dsn, tenant, "succeeded", 1), 30, "real run")
            await wait_for(all_dead_lettered, 30, "every bad message dead-lettered")
        return drain_values(stack.kafka, topics.dlq, expect=len(unreadable))

    letters = asyncio.run(scenario())
    assert executed_keys == [real.envelope(tenant).run_key]
    assert all(len(v) <= PRODUCER_MESSAGE_MAX_BYTES for v in letters)
    dead = {_digest(u): u for u in (UnreadableRun.decode(v) for v in letters if b'"kind"' in v)}
    for raw in unreadable:
        letter = dead.get(hashlib.sha256(raw).hexdigest())
        assert letter is not None, f"not dead-lettered: {raw[:200]!r}"
        assert letter.error, "dead-lettered without a reason"
        assert letter.original == raw or (letter.truncated and raw.startswith(letter.original))
