"""Kafka message shapes round-trip, and malformed ones fail naming the field."""

from __future__ import annotations

import base64
import hashlib
import re

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwheel.domain import run_key
from tickwheel.envelopes.dead_letters import DeadLetter, UnreadableRun
from tickwheel.envelopes.parsing import EnvelopeError, has_long_digit_run, loads_exact
from tickwheel.envelopes.registrations import REJECTION_REASON_MAX_CHARS, Registration, Rejection
from tickwheel.envelopes.run import RunEnvelope, encode_run, parse_run_key
from tickwheel.topics import Topics

pytestmark = pytest.mark.unit


def _run(**kw: object) -> RunEnvelope:
    base: dict[str, object] = dict(
        run_key=run_key("acme", "invoice-42", 1_764_579_600_000),
        tenant="acme",
        job_id="invoice-42",
        scheduled_at=1_764_579_600_000,
        attempt=1,
        epoch=3,
        priority="normal",
        payload={"n": 1},
        timeout_ms=300_000,
        handler="billing.send",
    )
    base.update(kw)
    return RunEnvelope(**base)  # type: ignore[arg-type]


def test_run_key_format_and_parse() -> None:
    """run keys are <tenant>/<job_id>@<unix_ms> and parse back to their parts"""
    key = run_key("acme", "a:b.c-1", 1700000000123)
    assert key == "acme/a:b.c-1@1700000000123"
    assert parse_run_key(key) == ("acme", "a:b.c-1", 1700000000123)
    with pytest.raises(EnvelopeError, match="run_key"):
        parse_run_key("acme-no-at")


def test_run_envelope_round_trip_and_headers() -> None:
    """a run envelope encodes with v=1 and the design's fields and decodes to itself"""
    env = _run()
    body = orjson.loads(env.encode())
    assert body["v"] == 1 and body["handler"] == "billing.send" and "target" not in body
    assert set(body) == {
        "v",
        "run_key",
        "tenant",
        "job_id",
        "scheduled_at",
        "attempt",
        "epoch",
        "priority",
        "handler",
        "payload",
        "timeout_ms",
    }
    assert RunEnvelope.decode(env.encode()) == env
    assert dict(env.headers()) == {"run_key": env.run_key.encode(), "epoch": b"3"}


def test_target_envelope_round_trip() -> None:
    """an HTTP-target run carries `target` instead of `handler`"""
    env = _run(handler=None, target={"url": "https://x.test/hook", "method": "POST"})
    assert RunEnvelope.decode(env.encode()) == env


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda b: b.pop("epoch"), "'epoch' is missing"),
        (lambda b: b.update(attempt="1"), "'attempt' has the wrong type"),
        (lambda b: b.update(attempt=True), "'attempt' has the wrong type"),
        (lambda b: b.update(v=2), "version 2"),
        (lambda b: b.update(run_key="acme/other@1"), "does not match"),
    ],
)
def test_malformed_run_envelopes_name_the_field(mutate: object, needle: str) -> None:
    """decoding a damaged envelope raises EnvelopeError naming what is wrong"""
    body = _run().to_dict()
    mutate(body)  # type: ignore[operator]
    with pytest.raises(EnvelopeError, match=needle):
        RunEnvelope.decode(orjson.dumps(body))


def test_non_json_and_non_object_values() -> None:
    """bytes that are not a JSON object are refused, not crashed on"""
    with pytest.raises(EnvelopeError, match="not JSON"):
        RunEnvelope.decode(b"\xff\x00")
    with pytest.raises(EnvelopeError, match="object"):
        Registration.decode(b"[1, 2]")


def test_dead_letter_round_trip() -> None:
    """a DLQ message is the run envelope plus error, attempts and dead_at"""
    dead = DeadLetter(run=_run(), error="boom", attempts=5, dead_at=1_764_579_700_000)
    body = orjson.loads(dead.encode())
    assert body["error"] == "boom" and body["attempts"] == 5 and body["run_key"]
    assert DeadLetter.decode(dead.encode()) == dead


def test_registration_ops() -> None:
    """upsert carries a job, the other ops an id; unknown ops are refused"""
    up = Registration(op="upsert", tenant="acme", job={"id": "j1"}, version=3)
    assert Registration.decode(up.encode()) == up and up.job_id == "j1"
    rm = Registration(op="delete", tenant="acme", id="j1")
    assert Registration.decode(rm.encode()) == rm and rm.job_id == "j1"
    with pytest.raises(EnvelopeError, match="'op' must be one of"):
        Registration.decode(b'{"op": "explode", "tenant": "acme", "id": "j"}')
    with pytest.raises(EnvelopeError, match="'job' is missing"):
        Registration.decode(b'{"op": "upsert", "tenant": "acme"}')


def test_calendar_ops_round_trip_without_a_job() -> None:
    """put_calendar carries a name and a calendar, delete_calendar a name and maybe force;
    neither names a job"""
    put = Registration("put_calendar", "acme", name="holidays", calendar={"dates": ["2026-12-25"]})
    assert Registration.decode(put.encode()) == put and put.job_id is None
    assert put.calendar_key == "calendar/holidays"
    rm = Registration("delete_calendar", "acme", name="holidays", force=True)
    assert Registration.decode(rm.encode()) == rm
    assert orjson.loads(rm.encode()) == {
        "op": "delete_calendar", "tenant": "acme", "name": "holidays", "force": True
    }  # fmt: skip


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"op": "put_calendar", "name": "h"}, "field 'calendar' is missing"),
        ({"op": "put_calendar", "calendar": {}}, "field 'name' is missing"),
        ({"op": "delete_calendar"}, "field 'name' is missing"),
        ({"op": "put_calendar", "name": 7, "calendar": {}}, "field 'name' has the wrong type"),
        ({"op": "put_calendar", "name": "h", "calendar": []}, "field 'calendar' has the wrong"),
        ({"op": "delete_calendar", "name": "h", "force": 1}, "field 'force' has the wrong type"),
        ({"op": "delete_calendar", "name": "h", "calendar": {}}, "'calendar' applies to op 'put_"),
        ({"op": "put_calendar", "name": "h", "calendar": {}, "force": True}, "'force' applies"),
        ({"op": "delete_calendar", "name": "h", "version": 2}, "'version' does not apply"),
        ({"op": "delete_calendar", "name": "h", "id": "j"}, "'id' does not apply"),
        ({"op": "put_calendar", "name": "h", "calendar": {}, "job": {}}, "'job' does not apply"),
        ({"op": "delete", "id": "j", "name": "h"}, "'name' applies to ops 'put_calendar' and"),
        ({"op": "delete", "id": "j", "force": True}, "'force' applies to op 'delete_calendar'"),
        ({"op": "upsert", "job": {}, "calendar": {}}, "'calendar' applies to op 'put_calendar'"),
    ],
)
def test_malformed_calendar_ops_name_the_field(body: dict[str, object], needle: str) -> None:
    """a calendar op missing its fields, or carrying a job's, is refused naming the field"""
    with pytest.raises(EnvelopeError, match=re.escape(needle)):
        Registration.decode(orjson.dumps({"tenant": "acme", **body}))


def test_rejection_keeps_the_original_bytes() -> None:
    """a rejection carries reason, source partition/offset and the exact original bytes"""
    original = b"\x00not json at all\xff"
    rej = Rejection(reason="value is not JSON", partition=3, offset=1234, original=original)
    body = orjson.loads(rej.encode())
    assert body["source"] == {"partition": 3, "offset": 1234}
    assert base64.b64decode(body["original"]) == original
    assert Rejection.decode(rej.encode()) == rej


def test_topic_names_take_the_prefix() -> None:
    """every topic of DESIGN §5 is named under the configured prefix"""
    t = Topics("acme")
    assert t.all() == [
        "acme.registrations",
        "acme.registrations.rejected",
        "acme.runs.high",
        "acme.runs.normal",
        "acme.runs.low",
        "acme.runs.dlq",
    ]
    with pytest.raises(ValueError, match="priority"):
        t.runs("urgent")


def test_integers_beyond_64_bits_stay_exact() -> None:
    """a huge integer is decoded exactly (not silently turned into a float) so it can be refused"""
    raw = (
        b'{"op": "upsert", "tenant": "t", "job": {"id": "j", "n": 123456789012345678901234567890}}'
    )
    reg = Registration.decode(raw)
    assert reg.job is not None and reg.job["n"] == 123456789012345678901234567890


@settings(max_examples=400)
@given(st.text(alphabet="0123456789 ,.-e٣x", max_size=60))
def test_the_long_digit_check_finds_what_the_regex_found(text: str) -> None:
    """the translate-based check agrees with `[0-9]{19,}` on text and bytes: ASCII digits
    only (an Arabic-Indic digit is no digit to it), runs of 18 are not long"""
    expected = re.search(r"[0-9]{19,}", text) is not None
    assert has_long_digit_run(text) is expected
    assert has_long_digit_run(text.encode()) is expected


def test_a_run_of_18_digits_is_not_long_and_19_is() -> None:
    assert not has_long_digit_run(b'{"n": 123456789012345678}')
    assert has_long_digit_run(b'{"n": 1234567890123456789}')


def test_a_job_payload_as_text_loads_any_json_value_exactly() -> None:
    """the worker reads a job's payload from its row as text: any JSON value, big integers
    exact, malformed text an EnvelopeError"""
    assert loads_exact('{"n": 123456789012345678901234567890}') == {
        "n": 123456789012345678901234567890
    }
    assert loads_exact("[1, 2.5]") == [1, 2.5]
    assert loads_exact(b"null") is None
    with pytest.raises(EnvelopeError, match="not JSON"):
        loads_exact("{")


def test_deep_nesting_with_long_numbers_is_an_envelope_error() -> None:
    """a value nested past the stdlib parser's depth is refused, not a RecursionError"""
    raw = b'{"op":"upsert","tenant":"t","job":' + b"[" * 1000 + b"12345678901234567890"
    raw += b"]" * 1000 + b"}"
    with pytest.raises(EnvelopeError, match="nests too deeply"):
        Registration.decode(raw)


def test_rejection_with_bad_base64_is_an_envelope_error() -> None:
    """a rejection whose `original` is not base64 names the field"""
    raw = b'{"reason": "x", "source": {"partition": 0, "offset": 1}, "original": "%%%"}'
    with pytest.raises(EnvelopeError, match="'original' is not base64"):
        Rejection.decode(raw)


def test_fitted_rejection_keeps_a_small_original_whole() -> None:
    """an original that fits is quoted whole, with no truncation fields"""
    rej = Rejection.fitted("bad", 1, 2, b'{"op": "upsert"}', max_bytes=1000)
    assert (rej.original, rej.truncated, rej.original_size) == (b'{"op": "upsert"}', False, None)
    assert set(orjson.loads(rej.encode())) == {"reason", "source", "original"}


@pytest.mark.parametrize(
    ("size", "cut"), [(700_000, False), (749_000, False), (750_000, True), (5_000_000, True)]
)
def test_fitted_rejection_cuts_a_large_original_with_size_and_digest(size: int, cut: bool) -> None:
    """an original too large to quote is cut so the rejection fits; size and SHA-256 name it"""
    original = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    rej = Rejection.fitted("payload: too large", 0, 9, original, max_bytes=999_000)
    encoded = rej.encode()
    assert len(encoded) <= 999_000
    assert Rejection.decode(encoded) == rej
    if not cut:
        assert rej.original == original and not rej.truncated
        return
    assert len(encoded) > 999_000 - 8  # as much of the original as fits (base64 quantum)
    assert rej.truncated and rej.original_size == size
    assert rej.original_sha256 == hashlib.sha256(original).hexdigest()
    assert original.startswith(rej.original) and rej.original


def test_fitted_rejection_cuts_an_endless_reason() -> None:
    """a reason quoting a huge field name is cut to REJECTION_REASON_MAX_CHARS"""
    rej = Rejection.fitted("x" * 600_000, 0, 0, b"{}", max_bytes=10_000)
    assert len(rej.reason) == REJECTION_REASON_MAX_CHARS and rej.reason.endswith("…")
    assert len(rej.encode()) <= 10_000


def test_truncated_rejection_without_its_digest_is_refused() -> None:
    """a rejection marked truncated must carry original_size and original_sha256"""
    raw = orjson.dumps(
        {"reason": "r", "source": {"partition": 0, "offset": 0}, "original": "", "truncated": True}
    )
    with pytest.raises(EnvelopeError, match="original_size"):
        Rejection.decode(raw)


def _valid_body() -> dict[str, object]:
    return _run().to_dict()


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("scheduled_at", 2**63, "'scheduled_at' must be an integer"),
        ("scheduled_at", -(2**63) - 1, "'scheduled_at' must be an integer"),
        ("scheduled_at", 2**62, "'scheduled_at' must be an integer"),
        ("scheduled_at", -2_300_000_000_000, "'scheduled_at' must be an integer"),
        ("attempt", 2**31, "'attempt' must be an integer"),
        ("attempt", 0, "'attempt' must be an integer"),
        ("epoch", -1, "'epoch' must be an integer"),
        ("epoch", 2**63, "'epoch' must be an integer"),
        ("timeout_ms", 0, "'timeout_ms' must be an integer"),
        ("tenant", "ac\x00me", "'tenant' must be a tenant name"),
        ("tenant", "acme\n", "'tenant' must be a tenant name"),
        ("tenant", "a" * 65, "'tenant' must be a tenant name"),
        ("job_id", "nigh\x00tly", "'job_id' must be a job id"),
        ("job_id", "x" * 129, "'job_id' must be a job id"),
        ("priority", "urgent", "'priority' must be one of high, normal, low"),
        ("origin", "forged", "'origin' must be one of"),
    ],
)
def test_run_envelope_values_the_ledger_cannot_hold_are_refused(
    field: str, value: object, needle: str
) -> None:
    """values Postgres cannot take (int64/int32 overflow, NUL, endless text) fail decoding,
    naming the field, instead of failing a worker's batch claim (issue 28, high 1)"""
    body = _valid_body()
    body[field] = value
    if field in ("tenant", "job_id", "scheduled_at"):
        parts = {k: body[k] for k in ("tenant", "job_id", "scheduled_at")}
        body["run_key"] = f"{parts['tenant']}/{parts['job_id']}@{parts['scheduled_at']}"
    raw = orjson.dumps(body) if not isinstance(value, int) or abs(value) < 2**63 else None
    if raw is None:  # orjson refuses integers beyond 64 bits: write the number by hand
        raw = orjson.dumps({**body, field: 0}).replace(
            f'"{field}":0'.encode(), f'"{field}":{value}'.encode()
        )
    with pytest.raises(EnvelopeError, match=needle):
        RunEnvelope.decode(raw)


def test_the_issue_repro_envelope_is_refused() -> None:
    """the exact forged envelope of the hostile probe is no run envelope"""
    raw = (
        b'{"v": 1, "run_key": "acme/nightly@9223372036854775808", "tenant": "acme",'
        b' "job_id": "nightly", "scheduled_at": 9223372036854775808, "attempt": 1, "epoch": 1,'
        b' "priority": "low", "payload": {}, "timeout_ms": 1000, "handler": "x.y"}'
    )
    with pytest.raises(EnvelopeError, match="scheduled_at"):
        RunEnvelope.decode(raw)


def test_a_run_key_of_thousands_of_digits_is_an_envelope_error() -> None:
    """a run key's instant of 5,000 digits is refused as malformed, not by int()'s digit limit"""
    with pytest.raises(EnvelopeError, match="run_key"):
        parse_run_key("acme/job@" + "9" * 5000)


@pytest.mark.parametrize("size", [780_000, 900_000, 5_000_000])
def test_an_unreadable_run_always_fits_one_message(size: int) -> None:
    """a huge message's unreadable record is cut to fit, keeping its size and SHA-256"""
    raw = b"G" * size
    record = UnreadableRun("value is not JSON", "p.runs.low", 0, 7, raw, "w-1", 1).fitted(999_000)
    encoded = record.encode()
    assert len(encoded) <= 999_000
    assert record.truncated and record.original_size == size
    assert record.original_sha256 == hashlib.sha256(raw).hexdigest()
    assert raw.startswith(record.original) and len(record.original) > 600_000
    assert UnreadableRun.decode(encoded) == record


def test_a_small_unreadable_run_keeps_its_bytes_whole() -> None:
    """a message that fits is quoted exactly, without the cut fields"""
    record = UnreadableRun("bad", "p.runs.low", 0, 7, b"\x00\xff", "w-1", 1).fitted(10_000)
    body = orjson.loads(record.encode())
    assert base64.b64decode(body["original"]) == b"\x00\xff" and "truncated" not in body


def test_a_dead_letter_with_an_endless_error_and_payload_fits() -> None:
    """a dead letter's error is cut and, if still too large, its payload left out with its
    size and digest"""
    letter = DeadLetter(
        run=_run(payload={"blob": "x" * 900_000}), error="E" * 50_000, attempts=3, dead_at=1
    ).fitted(200_000)
    encoded = letter.encode()
    assert len(encoded) <= 200_000
    assert len(letter.error) == REJECTION_REASON_MAX_CHARS and letter.error.endswith("…")
    payload = orjson.dumps({"blob": "x" * 900_000})
    assert letter.payload_omitted == {
        "size": len(payload),
        "sha256": hashlib.sha256(payload).hexdigest(),
    }
    assert DeadLetter.decode(encoded) == letter
    small = DeadLetter(run=_run(), error="boom", attempts=1, dead_at=1).fitted(200_000)
    assert small.payload_omitted is None and small.run.payload == {"n": 1}


@pytest.mark.parametrize("field", ["priority", "origin", "tenant", "job_id", "handler", "run_key"])
@pytest.mark.parametrize("value", [[], {}, ["normal"], 1.5, True])
def test_a_field_of_the_wrong_json_type_is_an_envelope_error(field: str, value: object) -> None:
    """a list, object, float or bool where a string belongs fails as EnvelopeError naming the
    field (the quick checks never let an unhashable value reach a set lookup)"""
    body = _valid_body()
    body[field] = value
    with pytest.raises(EnvelopeError, match=field):
        RunEnvelope.decode(orjson.dumps(body))


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)


@settings(max_examples=300)
@given(
    tenant=st.sampled_from(["acme", "t-1.x", 'q"uote', "back\\slash", "ctl\x01", "ümlaut"]),
    job_id=st.text(min_size=1, max_size=12),
    scheduled_at=st.integers(0, 2**53),
    attempt=st.integers(1, 2**31 - 1),
    epoch=st.integers(0, 2**63 - 1),
    payload=_JSON_VALUES,
    target=st.none() | st.fixed_dictionaries({"url": st.text(max_size=10)}),
    handler=st.text(max_size=12),
    origin=st.sampled_from(["schedule", "trigger", "backfill", "replay"]),
)
def test_the_leaders_encoding_is_the_envelopes_json(
    tenant: str,
    job_id: str,
    scheduled_at: int,
    attempt: int,
    epoch: int,
    payload: object,
    target: dict[str, str] | None,
    handler: str,
    origin: str,
) -> None:
    """encode_run, from JSON texts as Postgres returns them, is the same JSON value as the
    envelope's own encoding, whatever its strings hold (quotes, backslashes, control
    characters, non-ASCII)"""
    key = run_key(tenant, job_id, scheduled_at)
    payload_json = orjson.dumps(payload).decode()
    target_json = None if target is None else orjson.dumps(target).decode()
    fast = encode_run(
        key, tenant, job_id, scheduled_at, attempt, epoch, "normal", payload_json, 300_000,
        None if target is not None else handler, target_json, origin,
    )  # fmt: skip
    env = RunEnvelope(
        run_key=key,
        tenant=tenant,
        job_id=job_id,
        scheduled_at=scheduled_at,
        attempt=attempt,
        epoch=epoch,
        priority="normal",
        payload=payload,
        timeout_ms=300_000,
        handler=None if target is not None else handler,
        target=target,
        origin=origin,
    )
    assert orjson.loads(fast) == orjson.loads(env.encode())
