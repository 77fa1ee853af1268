"""Signed registrations: the header a producer adds, read and checked as the intake does."""

from __future__ import annotations

import pytest

from tickwheel.signatures import (
    SIGNATURE_HEADER,
    Signature,
    SignatureError,
    key_digest,
    parse,
    sign,
    verify,
)

pytestmark = pytest.mark.unit

KEY = "tw_" + "k" * 43
VALUE = b'{"op": "delete", "tenant": "acme", "id": "nightly"}'
TOPIC = "acme-prod.registrations"
ID = "0123456789abcdef0123456789abcdef"
AT = 1_790_000_000_000


def test_a_signature_verifies_under_the_stored_digest_of_its_key() -> None:
    """the header names the key by its 10-character prefix and carries the message id and
    signing instant; the MAC checks out against SHA-256 of the key (what the registry stores),
    and the key is nowhere in the header"""
    name, header = sign(VALUE, KEY, topic=TOPIC, message_id=ID, signed_at_ms=AT)
    assert name == SIGNATURE_HEADER
    signature = parse(header)
    assert (signature.prefix, signature.message_id, signature.signed_at_ms) == (KEY[:10], ID, AT)
    assert not signature.replayable
    assert verify(signature, VALUE, TOPIC, key_digest(KEY))
    assert KEY.encode() not in header


def test_each_message_gets_its_own_id_and_now_by_default() -> None:
    """without a given id, two signatures of the same value differ in their random id"""
    first, second = (parse(sign(VALUE, KEY, topic=TOPIC)[1]) for _ in range(2))
    assert first.message_id != second.message_id
    assert first.signed_at_ms is not None and first.signed_at_ms > AT - 10**12


def test_another_value_key_topic_id_or_instant_does_not_verify() -> None:
    """issue 28 finding 3: the MAC binds the value, the key, the topic (the deployment), the
    message id and the signing instant: changing any one of them fails"""
    signature = parse(sign(VALUE, KEY, topic=TOPIC, message_id=ID, signed_at_ms=AT)[1])
    digest = key_digest(KEY)
    assert not verify(signature, VALUE.replace(b"acme", b"acmf"), TOPIC, digest)
    assert not verify(signature, VALUE, TOPIC, key_digest(KEY + "x"))
    assert not verify(signature, VALUE, "acme-staging.registrations", digest)
    assert not verify(
        Signature(signature.prefix, signature.mac, "f" * 32, AT), VALUE, TOPIC, digest
    )
    assert not verify(Signature(signature.prefix, signature.mac, ID, AT + 1), VALUE, TOPIC, digest)


def test_a_form_1_signature_is_still_read_and_marked_replayable() -> None:
    """the header of releases before issue 28 (prefix and MAC of the value alone) parses as
    form 1, verifies as before, and says it can be replayed"""
    import hashlib
    import hmac

    mac = hmac.new(key_digest(KEY), VALUE, hashlib.sha256).hexdigest()
    signature = parse(f"{KEY[:10]}:{mac}".encode())
    assert signature.replayable and signature.message_id is None
    assert verify(signature, VALUE, "any.topic", key_digest(KEY))


@pytest.mark.parametrize(
    "header",
    [
        None,
        b"",
        b"no-colon",
        b"short:" + b"0" * 64,
        b"tw_kkkkkkk:" + b"0" * 63,
        b"tw_kkkkkkk:" + b"z" * 64,
        b"v2:tw_kkkkkkk:short-id:1:" + b"0" * 64,
        b"v2:tw_kkkkkkk:" + ID.encode() + b":soon:" + b"0" * 64,
        b"v2:tw_kkkkkkk:" + ID.encode() + b":99999999999999:" + b"0" * 64,
        b"v3:tw_kkkkkkk:" + ID.encode() + b":1:" + b"0" * 64,
    ],
)
def test_a_malformed_header_is_a_signature_error(header: bytes | None) -> None:
    """missing, without a prefix, with a prefix or MAC of the wrong length, a MAC not hex, a
    message id or instant out of form, an unknown form"""
    with pytest.raises(SignatureError, match=SIGNATURE_HEADER):
        parse(header)


def test_a_message_id_out_of_form_is_refused_when_signing() -> None:
    """a producer's own message id must have the form the intake reads"""
    with pytest.raises(ValueError, match="message_id"):
        sign(VALUE, KEY, topic=TOPIC, message_id="has:colon:and:is:long")
