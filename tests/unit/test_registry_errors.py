"""What the intake treats as "this input" (reject the message) versus "this moment" (retry)."""

from __future__ import annotations

import asyncpg
import pytest
from asyncpg.exceptions._base import DataError as ClientDataError

from tickwheel.db import is_data_error
from tickwheel.kafka.producing import PublishError
from tickwheel.registry_api.admission import refusal
from tickwheel.registry_api.intake import retryable
from tickwheel.registry_api.state import Op, Outcome, StoredJob
from tickwheel.registry_api.store import Applied

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "exc",
    [
        asyncpg.exceptions.CharacterNotInRepertoireError("invalid byte sequence: 0x00"),
        asyncpg.exceptions.NumericValueOutOfRangeError("bigint out of range"),
        asyncpg.exceptions.UniqueViolationError("duplicate key"),
        asyncpg.exceptions.ProgramLimitExceededError("index row too large"),
        asyncpg.exceptions.DataError("data exception"),
        ClientDataError("invalid input for query argument $1"),
        OverflowError("int too big to convert"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_data_errors_are_the_inputs_fault(exc: BaseException) -> None:
    """SQLSTATE 22/23/54, asyncpg's client DataError and OverflowError are data errors"""
    assert is_data_error(exc)
    assert not retryable(exc)


@pytest.mark.parametrize(
    "exc",
    [
        asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed"),
        asyncpg.exceptions.SerializationError("could not serialize access"),
        asyncpg.exceptions.UndefinedTableError("relation does not exist"),
        asyncpg.InterfaceError("pool is closed"),
        ConnectionRefusedError(111, "refused"),
        TimeoutError(),
        PublishError({0: "Local: Message timed out"}),
    ],
    ids=lambda e: type(e).__name__,
)
def test_unavailability_is_retried_not_blamed_on_the_input(exc: BaseException) -> None:
    """a connection, server state or broker failure retries the batch; it is no data error"""
    assert not is_data_error(exc)
    assert retryable(exc)


@pytest.mark.parametrize("exc", [TypeError("bug"), KeyError("k"), RuntimeError("x")])
def test_other_exceptions_are_neither(exc: BaseException) -> None:
    """a bug is not retried as a batch (it would wedge it) and is not a data error"""
    assert not is_data_error(exc) and not retryable(exc)


def _stored(version: int) -> StoredJob:
    return StoredJob("acme", "j", {}, "active", version, None)


def test_a_stale_op_is_refused_with_the_stored_version() -> None:
    """a stale version ends as a rejection naming both versions"""
    op = Op("pause", "acme", "j", version=3)
    reason = refusal(Applied(op, Outcome.STALE, _stored(7)))
    assert reason == "stale: version 3 of job 'j' is not newer than the stored version 7"


@pytest.mark.parametrize(
    ("outcome", "refused"),
    [(o, o in (Outcome.STALE, Outcome.NOT_FOUND, Outcome.CONFLICT)) for o in Outcome],
)
def test_every_outcome_is_applied_or_refused(outcome: Outcome, refused: bool) -> None:
    """only stale, not_found and conflict are refusals; every other outcome is applied"""
    op = Op("pause", "acme", "j", version=3)
    assert (refusal(Applied(op, outcome, _stored(7))) is not None) == refused
