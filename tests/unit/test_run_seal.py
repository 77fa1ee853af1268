"""The run envelope's seal (tickwheel/run_seal.py): only the value sealed under the key opens."""

from __future__ import annotations

import pytest

from tickwheel.run_seal import SEAL_BYTES, SEAL_HEADER, opens, seal

pytestmark = pytest.mark.unit

KEY = bytes(range(32))
VALUE = b'{"v":1,"run_key":"t/j@1"}'


def test_the_seal_of_a_value_opens_under_its_key() -> None:
    """a value sealed under the key opens beside the run_key and epoch headers"""
    mac = seal(KEY, VALUE)
    assert len(mac) == SEAL_BYTES
    assert opens(KEY, VALUE, [("run_key", b"t/j@1"), ("epoch", b"1"), (SEAL_HEADER, mac)])


@pytest.mark.parametrize(
    ("key", "value", "headers"),
    [
        (None, VALUE, [(SEAL_HEADER, seal(KEY, VALUE))]),
        (bytes(32), VALUE, [(SEAL_HEADER, seal(KEY, VALUE))]),
        (KEY, VALUE + b" ", [(SEAL_HEADER, seal(KEY, VALUE))]),
        (KEY, VALUE, [("run_key", b"t/j@1")]),
        (KEY, VALUE, None),
        (KEY, VALUE, []),
        (KEY, VALUE, [(SEAL_HEADER, seal(KEY, VALUE)[:8])]),
        (KEY, VALUE, [(SEAL_HEADER, None)]),
        (KEY, VALUE, [(SEAL_HEADER, seal(KEY, VALUE)), (SEAL_HEADER, b"x" * SEAL_BYTES)]),
        (KEY, VALUE, [(SEAL_HEADER, b"x" * SEAL_BYTES), (SEAL_HEADER, seal(KEY, VALUE))]),
    ],
    ids=[
        "no-key",
        "other-key",
        "value-altered",
        "no-seal-header",
        "no-headers",
        "empty-headers",
        "seal-cut",
        "seal-null",
        "second-seal-after",
        "second-seal-before",
    ],
)
def test_anything_else_does_not_open(
    key: bytes | None, value: bytes, headers: list[tuple[str, bytes | None]] | None
) -> None:
    """no key, another key, an altered value, a missing, cut or null seal, or two seals: closed"""
    assert not opens(key, value, headers)
