"""The shared vocabulary and time conversions."""

from __future__ import annotations

import datetime as dt
from typing import get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickwheel import clock
from tickwheel.domain import (
    PRIORITIES,
    JobStatus,
    Priority,
    RunKeyError,
    RunStatus,
    job_key,
    literal_of,
    parse_run_key,
    run_key,
)

pytestmark = pytest.mark.unit


def test_run_key_round_trips() -> None:
    """A run key parses back into its tenant, job id and instant."""
    key = run_key("acme", "invoice-42", 1_764_579_600_000)
    assert key == "acme/invoice-42@1764579600000"
    assert parse_run_key(key) == ("acme", "invoice-42", 1_764_579_600_000)
    assert job_key("acme", "invoice-42") == "acme/invoice-42"


@pytest.mark.parametrize("bad", ["", "acme/job", "acme@1", "a/b@x", "a/b/c@1", "a/b@1@2"])
def test_malformed_run_keys_are_refused(bad: str) -> None:
    """Strings that are not run keys raise RunKeyError naming the form."""
    with pytest.raises(RunKeyError, match="<tenant>/<job_id>@<unix_ms>"):
        parse_run_key(bad)


def test_vocabulary_matches_the_stored_strings() -> None:
    """Enum members compare equal to the strings the database and JSON carry."""
    assert RunStatus.SUCCEEDED == "succeeded"
    assert PRIORITIES == ("high", "normal", "low")


@given(st.integers(min_value=-(10**13), max_value=10**14))
def test_ms_datetime_round_trip_is_exact(ms: int) -> None:
    """ms → datetime → ms is the identity, with no float rounding."""
    assert clock.datetime_to_ms(clock.ms_to_datetime(ms)) == ms


def test_naive_datetime_is_refused_and_formats() -> None:
    """A naive datetime has no instant; formatting keeps milliseconds or floors to seconds."""
    with pytest.raises(ValueError, match="naive"):
        clock.datetime_to_ms(dt.datetime(2026, 1, 1))
    assert clock.format_ms(1_764_579_600_250) == "2025-12-01T09:00:00.250Z"
    assert clock.format_seconds(1_764_579_600_999) == "2025-12-01T09:00:00Z"


def test_millisecond_conversions_are_exact_far_from_the_epoch() -> None:
    """ms ↔ datetime conversions lose nothing at the ends of the supported range"""
    for ms in (0, 1, -1, 1_800_000_000_123, 253_402_300_799_999, -2_208_988_800_000):
        assert clock.datetime_to_ms(clock.ms_to_datetime(ms)) == ms
    assert clock.format_ms(-2_208_988_800_000) == "1900-01-01T00:00:00.000Z"


def test_literal_of_keeps_the_enum_order() -> None:
    """a literal built from an enum lists its values in declaration order, subsets too"""
    assert get_args(literal_of(Priority)) == PRIORITIES
    assert get_args(literal_of((JobStatus.ACTIVE, JobStatus.PAUSED))) == ("active", "paused")
