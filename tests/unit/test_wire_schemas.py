"""docs/schemas/ and the hand-written codecs of `tickwheel.envelopes` agree: the committed files
are what the models give, every message the codecs write validates, and every message the
schemas admit the decoders accept (samples generated from the schemas themselves)."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from tickwheel.domain import ATTEMPT_MAX, PRIORITIES, TENANT_PATTERN, RegistrationOp, RunOrigin
from tickwheel.envelopes.dead_letters import DeadLetter, UnreadableRun
from tickwheel.envelopes.parsing import EnvelopeError
from tickwheel.envelopes.registrations import REJECTION_REASON_MAX_CHARS, Registration, Rejection
from tickwheel.envelopes.run import RunEnvelope
from tickwheel.registry_api.document import check_version, parse_document
from tickwheel.schedule.cron import MAX_AFTER_MS, MIN_AFTER_MS
from tickwheel.signatures import sign
from tickwheel.wire import messages
from tickwheel.wire.calendar import CALENDAR_NAME_PATTERN, CalendarDocument
from tickwheel.wire.job import JOB_ID_PATTERN, TIMEOUT_LIMIT_MS
from tickwheel.wire.schemas import DEFAULT_DIR, drifted, render, schemas, validator

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def _schema(name: str) -> dict[str, Any]:
    return dict(schemas()[f"{name}.schema.json"])


# --- samples drawn from a schema -----------------------------------------------------------
# Our own generator over the part of JSON Schema the models emit ($ref into $defs, anyOf and
# oneOf, const, enum, objects with required and optional properties, bounded integers, strings
# with a pattern or a length, any JSON, `not`); every draw is checked against the whole schema,
# so a keyword it does not know could only make it draw nothing, never an invalid sample.

ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=8,
)
TEXT_MAX = 40  # characters of a string without a pattern; the schema's bound, if lower


def from_schema(root: dict[str, Any]) -> st.SearchStrategy[Any]:
    check = Draft202012Validator(root)

    def build(node: dict[str, Any]) -> st.SearchStrategy[Any]:
        if "$ref" in node:
            return st.deferred(lambda: build(root["$defs"][node["$ref"].rsplit("/", 1)[1]]))
        if "const" in node:
            return st.just(node["const"])
        if "enum" in node:
            return st.sampled_from(node["enum"])
        for key in ("anyOf", "oneOf"):
            if key in node:
                return st.one_of([build(option) for option in node[key]])
        kind = node.get("type")
        if kind == "object":
            return _object(node)
        if kind == "integer":
            high = node.get("maximum", node.get("exclusiveMaximum", 2**63) - 1)
            return st.integers(node.get("minimum", -(2**63)), high)
        if kind == "string":
            low, high = node.get("minLength", 0), node.get("maxLength", 10**6)
            if "pattern" in node:
                text = st.from_regex(node["pattern"], fullmatch=True)
                return text.filter(lambda t: low <= len(t) <= high)
            return st.text(min_size=low, max_size=max(low, min(high, TEXT_MAX)))
        if kind == "boolean":
            return st.booleans()
        if kind == "null":
            return st.none()
        if "not" in node:
            refused = Draft202012Validator(node["not"])
            return ANY_JSON.filter(lambda v: not refused.is_valid(v))
        return ANY_JSON

    def _object(node: dict[str, Any]) -> st.SearchStrategy[Any]:
        properties, required = node.get("properties", {}), set(node.get("required", ()))
        fixed = {name: build(properties[name]) for name in required}
        optional = {name: build(sub) for name, sub in properties.items() if name not in required}
        extra = node.get("additionalProperties")
        extras = (
            st.dictionaries(st.text(min_size=1, max_size=8), build(extra), max_size=3)
            if isinstance(extra, dict)
            else st.just({})
        )
        return st.builds(
            lambda a, b, c: {**c, **b, **a},
            st.fixed_dictionaries(fixed),
            st.fixed_dictionaries({}, optional=optional),
            extras,
        )

    return build(root).filter(check.is_valid)


# --- the files -------------------------------------------------------------------------------


def test_committed_schemas_are_what_the_models_give() -> None:
    """docs/schemas/ holds exactly the files `python -m tickwheel.wire.schemas` writes: a model
    changed without regenerating them fails here."""
    assert drifted(DEFAULT_DIR) == []


def test_a_drifted_or_stray_file_is_named(tmp_path: Path) -> None:
    """The drift check names a changed file, a missing one and one no model makes."""
    for name, schema in schemas().items():
        (tmp_path / name).write_text(render(schema))
    (tmp_path / "rejection.schema.json").write_text("{}\n")
    (tmp_path / "run-envelope.schema.json").unlink()
    (tmp_path / "old.schema.json").write_text("{}\n")
    assert drifted(tmp_path) == [
        "old.schema.json",
        "rejection.schema.json",
        "run-envelope.schema.json",
    ]


def test_the_schemas_state_what_the_code_holds_elsewhere() -> None:
    """The tenant pattern is migration 0001's constraint, the reason bound the codec's, and the
    registration schema covers every op of the domain."""
    migration = (ROOT / "tickwheel/sql/migrations/0001_init.sql").read_text()
    assert f"name ~ '{TENANT_PATTERN}'" in migration
    assert messages.REASON_MAX_CHARS == REJECTION_REASON_MAX_CHARS
    ops = {
        variant["properties"]["op"]["const"]
        for variant in _schema("registration")["$defs"].values()
        if "op" in variant.get("properties", {})
    }
    assert ops == {op.value for op in RegistrationOp}
    signature = _schema("registration")["x-kafka"]["headers"]["tickwheel-signature"]
    assert re.fullmatch(
        signature["pattern"],
        sign(b"{}", "tw_" + "k" * 40, topic="tickwheel.registrations")[1].decode(),
    )


# --- what the codecs write validates -----------------------------------------------------------

TENANTS = st.from_regex(TENANT_PATTERN, fullmatch=True)
JOB_IDS = st.from_regex(JOB_ID_PATTERN, fullmatch=True)
HANDLERS = st.from_regex(r"[a-z_][a-z0-9_]{0,8}(\.[a-z_][a-z0-9_]{0,8}){0,2}", fullmatch=True)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
TARGETS = st.builds(
    lambda url, method, headers: {"url": url, "method": method, "headers": headers},
    st.sampled_from(["https://hooks.example.test/a", "http://10.0.0.1:8080/x?y=1"]),
    st.sampled_from(["POST", "PUT", "PATCH"]),
    st.dictionaries(st.from_regex(r"X-[A-Za-z]{1,8}", fullmatch=True), st.text(max_size=10)),
)


@st.composite
def run_envelopes(draw: st.DrawFn) -> RunEnvelope:
    tenant, job_id = draw(TENANTS), draw(JOB_IDS)
    scheduled = draw(st.integers(MIN_AFTER_MS, MAX_AFTER_MS - 1))
    target = draw(st.none() | TARGETS)
    return RunEnvelope(
        run_key=f"{tenant}/{job_id}@{scheduled}",
        tenant=tenant,
        job_id=job_id,
        scheduled_at=scheduled,
        attempt=draw(st.integers(1, ATTEMPT_MAX)),
        epoch=draw(st.integers(0, 2**63 - 1)),
        priority=draw(st.sampled_from(PRIORITIES)),
        payload=draw(JSON),
        timeout_ms=draw(st.integers(1, TIMEOUT_LIMIT_MS)),
        handler=draw(HANDLERS) if target is None else None,
        target=target,
        origin=draw(st.none() | st.sampled_from([o.value for o in RunOrigin])),
    )


def _valid(name: str, raw: bytes) -> None:
    problems = validator(name)(orjson.loads(raw))
    assert problems == [], raw


@SAMPLES
@given(run_envelopes())
def test_every_run_envelope_the_codec_writes_validates(env: RunEnvelope) -> None:
    """RunEnvelope.encode of any run a leader could dispatch follows run-envelope.schema.json."""
    _valid("run-envelope", env.encode())


@SAMPLES
@given(
    run_envelopes(),
    st.text(max_size=3000),
    st.integers(1, ATTEMPT_MAX),
    st.integers(MIN_AFTER_MS, MAX_AFTER_MS - 1),
    st.none() | st.text(max_size=12),
    st.sampled_from([1_000_000, 1_500]),
)
def test_every_dead_letter_the_codec_writes_validates(
    env: RunEnvelope, error: str, attempts: int, dead_at: int, worker: str | None, room: int
) -> None:
    """DeadLetter.fitted follows dead-letter.schema.json: with and without a worker, its error
    cut, its payload left out (size and digest kept) when the letter would not fit."""
    try:
        letter = DeadLetter(env, error, attempts, dead_at, worker).fitted(room)
    except ValueError:
        return  # no letter at all: nothing was written
    _valid("dead-letter", letter.encode())


@SAMPLES
@given(
    st.binary(max_size=300),
    st.text(max_size=3000),
    st.text(min_size=1, max_size=20),
    st.integers(0, 2**20),
    st.integers(0, 2**40),
    st.integers(MIN_AFTER_MS, MAX_AFTER_MS - 1),
)
def test_every_unreadable_letter_validates(
    raw: bytes, error: str, topic: str, partition: int, offset: int, dead_at: int
) -> None:
    """UnreadableRun.encode (a message on a run topic that is no envelope) follows the
    dead-letter schema's unreadable form."""
    _valid(
        "dead-letter", UnreadableRun(error, topic, partition, offset, raw, "w-1", dead_at).encode()
    )


@SAMPLES
@given(
    st.text(max_size=3000),
    st.integers(0, 2**20),
    st.integers(0, 2**40),
    st.binary(max_size=2000),
    st.integers(700, 4000),
)
def test_every_rejection_the_codec_writes_validates(
    reason: str, partition: int, offset: int, original: bytes, max_bytes: int
) -> None:
    """Rejection.fitted, whole or cut to its size and digest, follows rejection.schema.json."""
    _valid("rejection", Rejection.fitted(reason, partition, offset, original, max_bytes).encode())


def _parses(doc: dict[str, Any]) -> bool:
    try:
        parse_document(doc)
    except ValueError:
        return False
    return True


# The cross-field rule (backoff.cap_ms >= base_ms) is the model's, not the schema's.
JOB_DOCUMENTS = from_schema(_schema("job-document")).filter(_parses)


CALENDAR_NAMES = st.from_regex(CALENDAR_NAME_PATTERN, fullmatch=True)
CALENDARS = st.sampled_from(
    [
        {},
        {"timezone": "Europe/Paris", "dates": ["2026-12-25"], "weekdays": ["sat", "sun"]},
        {"daily": [{"start": "22:00", "end": "06:00"}], "cron": ["0 12 * * *"]},
        {"description": "year-end freeze", "dates": ["2026-12-31", "2027-01-01"]},
    ]
)


@st.composite
def registrations(draw: st.DrawFn) -> Registration:
    op = draw(st.sampled_from([o.value for o in RegistrationOp]))
    tenant = draw(TENANTS)
    if op == RegistrationOp.PUT_CALENDAR:
        return Registration(op, tenant, name=draw(CALENDAR_NAMES), calendar=draw(CALENDARS))
    if op == RegistrationOp.DELETE_CALENDAR:
        force = draw(st.none() | st.booleans())
        return Registration(op, tenant, name=draw(CALENDAR_NAMES), force=force)
    versioned = op not in (RegistrationOp.TRIGGER, RegistrationOp.BACKFILL)
    version = draw(st.none() | st.integers(1, 2**53 - 1)) if versioned else None
    if op == RegistrationOp.UPSERT:
        return Registration(op, tenant, job=draw(JOB_DOCUMENTS), version=version)
    if op == RegistrationOp.BACKFILL:
        return Registration(
            op, tenant, id=draw(JOB_IDS), window_from="2026-11-20T00:00:00Z",
            window_to="2026-11-23T00:00:00+01:00",
        )  # fmt: skip
    key = draw(st.none() | st.text(min_size=1, max_size=255)) if op == "trigger" else None
    return Registration(op, tenant, id=draw(JOB_IDS), version=version, idempotency_key=key)


@SAMPLES
@given(registrations())
def test_every_registration_the_codec_writes_validates(reg: Registration) -> None:
    """Registration.encode of any op, versioned or not, follows registration.schema.json."""
    _valid("registration", reg.encode())


# --- what the schemas admit the decoders accept ----------------------------------------------


# Optional fields a message may carry as null; the codecs read null as absent and omit them.
NULL_AS_ABSENT = (
    "origin", "worker", "version", "idempotency_key", "payload_omitted", "note", "due", "force"
)  # fmt: skip


def _as_written(sample: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in sample.items() if not (k in NULL_AS_ABSENT and v is None)}


def _run_key_matching(sample: dict[str, Any]) -> dict[str, Any]:
    """A run key naming the sample's own tenant, job id and instant (a rule no JSON Schema
    can state: the schema describes it)."""
    return {**sample, "run_key": f"{sample['tenant']}/{sample['job_id']}@{sample['scheduled_at']}"}


@SAMPLES
@given(from_schema(_schema("run-envelope")).map(_run_key_matching))
def test_the_run_decoder_accepts_what_the_schema_admits(sample: dict[str, Any]) -> None:
    """Any run envelope the schema admits decodes, and encodes back to the same JSON."""
    assert validator("run-envelope")(sample) == []
    env = RunEnvelope.decode(orjson.dumps(sample))
    assert env.to_dict() == _as_written(sample)


def _dead_sample(sample: dict[str, Any]) -> dict[str, Any]:
    return sample if sample.get("kind") == "unreadable" else _run_key_matching(sample)


@SAMPLES
@given(from_schema(_schema("dead-letter")).map(_dead_sample))
def test_the_dead_letter_decoders_accept_what_the_schema_admits(sample: dict[str, Any]) -> None:
    """A dead letter the schema admits decodes as what its `kind` says, to the same fields."""
    assert validator("dead-letter")(sample) == []
    raw = orjson.dumps(sample)
    if sample.get("kind") == "unreadable":
        letter = UnreadableRun.decode(raw)
        assert (letter.error, letter.worker, letter.dead_at) == (
            sample["error"],
            sample["worker"],
            sample["dead_at"],
        )
        assert base64.b64encode(letter.original).decode() == sample["original"]
    else:
        dead = DeadLetter.decode(raw)
        assert (dead.error, dead.attempts, dead.dead_at, dead.worker) == (
            sample["error"],
            sample["attempts"],
            sample["dead_at"],
            sample.get("worker"),
        )
        assert orjson.loads(dead.encode()) == _as_written(sample)


@SAMPLES
@given(from_schema(_schema("rejection")))
def test_the_rejection_decoder_accepts_what_the_schema_admits(sample: dict[str, Any]) -> None:
    """Any rejection the schema admits decodes, and encodes back to the same JSON."""
    assert orjson.loads(Rejection.decode(orjson.dumps(sample)).encode()) == sample


@SAMPLES
@given(from_schema(_schema("registration")))
def test_the_registration_decoder_accepts_what_the_schema_admits(sample: dict[str, Any]) -> None:
    """Any registration the schema admits decodes with its op's fields; an upsert's job passes
    the registry's shape check and a version its bounds (what remains is context: the zone,
    the schedule in it, the payload limit, the allowlist)."""
    try:
        reg = Registration.decode(orjson.dumps(sample))
    except EnvelopeError as exc:
        pytest.fail(f"{sample}: {exc}")
    assert orjson.loads(reg.encode()) == _as_written(sample)
    check_version(reg.version)
    if reg.calendar is not None:
        CalendarDocument.model_validate(reg.calendar)
    if reg.job is not None:
        try:
            parse_document(reg.job)
        except ValueError as exc:
            # cap_ms >= base_ms is the model's rule, which no JSON Schema states
            assert str(exc).startswith("backoff.cap_ms: must be at least base_ms"), exc


# --- and where the decoders refuse, the schemas refuse too ------------------------------------

VALID_RUN = RunEnvelope(
    run_key="acme/nightly@1796025600000",
    tenant="acme",
    job_id="nightly",
    scheduled_at=1796025600000,
    attempt=1,
    epoch=3,
    priority="normal",
    payload={"n": 1},
    timeout_ms=60_000,
    handler="billing.run",
    origin="schedule",
).to_dict()
# Where the decoder is more lenient than the schema, which is the producers' contract: it takes
# a missing payload as null, and a missing origin is an older leader's envelope.
DECODER_LENIENT = {"payload", "origin"}


@pytest.mark.parametrize("name", sorted(VALID_RUN))
def test_a_run_envelope_missing_a_field_is_refused_by_both(name: str) -> None:
    """Without any one of its required fields an envelope fails the schema and the decoder."""
    sample = {k: v for k, v in VALID_RUN.items() if k != name}
    if name in DECODER_LENIENT:
        RunEnvelope.decode(orjson.dumps(sample))
        if name == "origin":
            return
    else:
        with pytest.raises(EnvelopeError, match=re.escape(name) if name != "v" else "'v'"):
            RunEnvelope.decode(orjson.dumps(sample))
    assert validator("run-envelope")(sample) != []


@pytest.mark.parametrize("wrong", ["scalar", {}, [1]], ids=["scalar", "object", "array"])
@pytest.mark.parametrize("name", sorted(set(VALID_RUN) - {"payload"}))
def test_a_run_envelope_field_of_the_wrong_type_is_refused_by_both(name: str, wrong: Any) -> None:
    """A string where a number belongs, a number where a string does, or an object or array
    anywhere but the payload: the schema refuses it, and the decoder with an EnvelopeError
    (never another exception a worker's loop would not expect)."""
    if wrong == "scalar":
        wrong = "7" if isinstance(VALID_RUN[name], int) else 7
    sample = {**VALID_RUN, name: wrong}
    with pytest.raises(EnvelopeError):
        RunEnvelope.decode(orjson.dumps(sample))
    assert validator("run-envelope")(sample) != []
