"""The transient database errors have one home, and every long-running loop retries on it."""

from __future__ import annotations

import asyncpg
import pytest

from tickwheel import db
from tickwheel.registry_api import intake, store
from tickwheel.shards import store as shard_store
from tickwheel.workers import record

pytestmark = pytest.mark.unit


def test_a_connection_cut_mid_protocol_is_transient_everywhere() -> None:
    """asyncpg's InternalClientError (a Postgres restart mid-query; it is not an
    InterfaceError) is retried by leaders, workers and the registry instead of killing them"""
    cut = asyncpg.InternalClientError("cannot switch to state 12; another operation is in progress")
    assert isinstance(cut, db.DB_ERRORS)
    assert shard_store.DB_ERRORS is db.DB_ERRORS
    assert isinstance(cut, record.RECORD_ERRORS)
    assert intake.retryable(cut)
    assert isinstance(cut, store.DB_UNAVAILABLE)
