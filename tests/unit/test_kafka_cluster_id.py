"""The dev stack's KRaft cluster id never looks like an option to the storage tool."""

from __future__ import annotations

import uuid

import pytest

from tickwheel.stack import kafka

pytestmark = pytest.mark.unit


def test_a_cluster_id_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    """a UUID whose base64 begins with '-' is drawn again (it made `tickwheel dev up` fail
    1 time in 64 with "argument --cluster-id: expected one argument")"""
    dashed = uuid.UUID(bytes=b"\xf8" + bytes(15))  # base64: "-A…"
    draws = iter([dashed, uuid.UUID(int=1)])
    monkeypatch.setattr(kafka.uuid, "uuid4", lambda: next(draws))
    cluster_id = kafka.new_cluster_id()
    assert not cluster_id.startswith("-") and len(cluster_id) == 22
