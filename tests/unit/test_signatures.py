"""Signed registrations: the header a producer adds, read and checked as the intake does."""

from __future__ import annotations

import pytest

from tickwheel.signatures import (
    SIGNATURE_HEADER,
    SignatureError,
    key_digest,
    parse,
    sign,
    verify,
)

pytestmark = pytest.mark.unit

KEY = "tw_" + "k" * 43
VALUE = b'{"op": "delete", "tenant": "acme", "id": "nightly"}'


def test_a_signature_verifies_under_the_stored_digest_of_its_key() -> None:
    """the header names the key by its 10-character prefix; the MAC checks out against
    SHA-256 of the key (what the registry stores), and the key is nowhere in the header"""
    name, header = sign(VALUE, KEY)
    assert name == SIGNATURE_HEADER
    prefix, mac = parse(header)
    assert prefix == KEY[:10]
    assert verify(VALUE, mac, key_digest(KEY))
    assert KEY.encode() not in header


def test_another_value_or_another_key_does_not_verify() -> None:
    """one changed byte of the value, or the MAC checked against another key's digest, fails"""
    _, mac = parse(sign(VALUE, KEY)[1])
    assert not verify(VALUE.replace(b"acme", b"acmf"), mac, key_digest(KEY))
    assert not verify(VALUE, mac, key_digest(KEY + "x"))


@pytest.mark.parametrize(
    "header",
    [
        None,
        b"",
        b"no-colon",
        b"short:" + b"0" * 64,
        b"tw_kkkkkkk:" + b"0" * 63,
        b"tw_kkkkkkk:" + b"z" * 64,
    ],
)
def test_a_malformed_header_is_a_signature_error(header: bytes | None) -> None:
    """missing, without a prefix, with a prefix or MAC of the wrong length, or a MAC not hex"""
    with pytest.raises(SignatureError, match=SIGNATURE_HEADER):
        parse(header)
