"""The run envelope's seal (tickwheel/run_seal.py): only the value sealed under the key opens."""

from __future__ import annotations

import pytest

from tickwheel.run_seal import SEAL_BYTES, SEAL_HEADER, RunSeal

pytestmark = pytest.mark.unit

KEY = bytes(range(32))
VALUE = b'{"v":1,"run_key":"t/j@1"}'
MAC = RunSeal(KEY).seal(VALUE)


def test_the_seal_of_a_value_opens_under_its_key() -> None:
    """a value sealed under the key opens beside the run_key and epoch headers, and the seal
    depends on the key and the value only"""
    sealer = RunSeal(KEY)
    assert len(MAC) == SEAL_BYTES and sealer.seal(VALUE) == MAC
    assert sealer.opens(VALUE, [("run_key", b"t/j@1"), ("epoch", b"1"), (SEAL_HEADER, MAC)])
    assert RunSeal(bytes(32)).seal(VALUE) != MAC
    assert sealer.seal(VALUE + b" ") != MAC


@pytest.mark.parametrize(
    ("key", "value", "headers"),
    [
        (bytes(32), VALUE, [(SEAL_HEADER, MAC)]),
        (KEY, VALUE + b" ", [(SEAL_HEADER, MAC)]),
        (KEY, VALUE, [("run_key", b"t/j@1")]),
        (KEY, VALUE, None),
        (KEY, VALUE, []),
        (KEY, VALUE, [(SEAL_HEADER, MAC[:8])]),
        (KEY, VALUE, [(SEAL_HEADER, None)]),
        (KEY, VALUE, [(SEAL_HEADER, MAC), (SEAL_HEADER, b"x" * SEAL_BYTES)]),
        (KEY, VALUE, [(SEAL_HEADER, b"x" * SEAL_BYTES), (SEAL_HEADER, MAC)]),
    ],
    ids=[
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
    key: bytes, value: bytes, headers: list[tuple[str, bytes | None]] | None
) -> None:
    """another key, an altered value, a missing, cut or null seal, or two seals: closed"""
    assert not RunSeal(key).opens(value, headers)


def test_a_key_of_another_length_is_refused() -> None:
    """the key is the 32 bytes migration 0013 makes, nothing shorter"""
    with pytest.raises(ValueError, match="32 bytes"):
        RunSeal(b"short")
