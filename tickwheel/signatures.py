"""Signed registrations: a producer proves which tenant's API key it holds, without sending it,
and that the message was made for this deployment, once, lately.

A registration produced to `<prefix>.registrations` may carry the header

    tickwheel-signature: v2:<key prefix>:<message id>:<signed at, unix ms>:<MAC, hex>

where the MAC is HMAC-SHA256, under SHA-256 of the API key (the digest the registry stores for
the key, `api_keys.key_hash`), of

    tickwheel-registration-v2 LF <topic> LF <message id> LF <signed at> LF <the value's bytes>

and the prefix is the key's first `PREFIX_CHARS` characters, which the registry stores in
clear to name it. The registry finds the key by its prefix and verifies the MAC without ever
holding the key, and the key itself never travels: a key inside the message would be kept by
the topic and quoted, with the rest of the original, on the rejected topic.

What each part binds, against a producer-side attacker who captured a signed message:

- the topic: it names the deployment (its prefix), so a message signed for one deployment
  does not verify on another, even one whose tenants hold the same API keys;
- the message id (`MESSAGE_ID_FORM`, random by default): the intake remembers the ids it
  received, with where it received them, for the widest signature window of the
  deployment's registries (its database's `deployment` row; a registry that widens it refuses
  messages signed before the memory was complete for the wider window); the same id again at
  another position is a replay and changes nothing (a redelivery at the same position is the
  same message, which the intake's positions make a no-op anyway);
- the signing instant: outside the window (too old, or ahead of the registry's clock by more
  than `FUTURE_SKEW_MS`) a message is refused, so the intake needs to remember ids for the
  window only.

Form 1, `<key prefix>:<MAC of the value alone>` (before issue 28), is still read: it proves
the key but can be replayed anywhere, so an intake that requires signatures refuses it, and
one that does not (which takes unsigned messages anyway) checks it as before.

Pure functions; `sign` is what a producing service calls (it needs no connection to anything).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from tickwheel.clock import now_ms

SIGNATURE_HEADER = "tickwheel-signature"
PREFIX_CHARS = 10  # leading characters of a key stored in clear (registry_api/store.py)
FORM_2 = "v2"
MESSAGE_ID_RULE = "16 to 64 of A-Z a-z 0-9 _ -"
MESSAGE_ID_FORM = re.compile(r"[A-Za-z0-9_-]{16,64}")
FUTURE_SKEW_MS = 300_000  # ms a signing instant may lie ahead of the registry's clock
_MAC_HEX_CHARS = 64
_PREFIX_FORM = re.compile(rf"[A-Za-z0-9_-]{{{PREFIX_CHARS}}}")
_INSTANT_FORM = re.compile(r"[0-9]{1,13}")  # unix ms up to the year 2286
_DOMAIN = b"tickwheel-registration-v2"


class SignatureError(ValueError):
    """A signature header that cannot even be read; the message is rejected with this text."""


@dataclass(frozen=True)
class Signature:
    """A signature header as read: form 2 has a message id and a signing instant, form 1
    (the value alone, replayable) has neither."""

    prefix: str
    mac: bytes
    message_id: str | None = None
    signed_at_ms: int | None = None

    @property
    def replayable(self) -> bool:
        return self.message_id is None


def key_digest(api_key: str) -> bytes:
    """SHA-256 of an API key: what the registry stores, and the MAC's secret."""
    return hashlib.sha256(api_key.encode()).digest()


def _signed_bytes(value: bytes, topic: str, message_id: str, signed_at_ms: int) -> bytes:
    return b"\n".join((_DOMAIN, topic.encode(), message_id.encode(), b"%d" % signed_at_ms, value))


def sign(
    value: bytes,
    api_key: str,
    *,
    topic: str,
    message_id: str | None = None,
    signed_at_ms: int | None = None,
) -> tuple[str, bytes]:
    """The header (name, value) that signs `value` with `api_key` for `topic` (the
    registrations topic it is produced to), for `produce(headers=...)`.

    `message_id`: unique per message (a random one by default; give your own to make a
    producer's retry of one registration the same message); `signed_at_ms`: now by default.
    """
    message_id = secrets.token_hex(16) if message_id is None else message_id
    if not MESSAGE_ID_FORM.fullmatch(message_id):
        raise ValueError(f"message_id must be {MESSAGE_ID_RULE}, not {message_id!r}")
    signed_at_ms = now_ms() if signed_at_ms is None else signed_at_ms
    signed = _signed_bytes(value, topic, message_id, signed_at_ms)
    mac = hmac.new(key_digest(api_key), signed, hashlib.sha256).hexdigest()
    header = f"{FORM_2}:{api_key[:PREFIX_CHARS]}:{message_id}:{signed_at_ms}:{mac}"
    return SIGNATURE_HEADER, header.encode()


def parse(header: bytes | str | None) -> Signature:
    """The signature a header's value holds (form 2, or form 1); SignatureError if malformed."""
    if header is None:
        raise SignatureError(f"header {SIGNATURE_HEADER!r} is empty")
    text = header.decode("ascii", "replace") if isinstance(header, bytes) else header
    parts = text.split(":")
    if len(parts) == 5 and parts[0] == FORM_2:
        _, prefix, message_id, signed_at, mac = parts
        if not (MESSAGE_ID_FORM.fullmatch(message_id) and _INSTANT_FORM.fullmatch(signed_at)):
            raise SignatureError(_form_error())
        return Signature(_prefix(prefix), _mac(mac), message_id, int(signed_at))
    if len(parts) == 2:
        return Signature(_prefix(parts[0]), _mac(parts[1]))
    raise SignatureError(_form_error())


def _form_error() -> str:
    return (
        f"header {SIGNATURE_HEADER!r} must be '{FORM_2}:<the key's first {PREFIX_CHARS} "
        f"characters>:<message id: {MESSAGE_ID_RULE}>:<signed at, unix ms>:<{_MAC_HEX_CHARS} "
        "hex digits of HMAC-SHA256>' (tickwheel.signatures.sign)"
    )


def _prefix(text: str) -> str:
    if not _PREFIX_FORM.fullmatch(text):
        raise SignatureError(_form_error())
    return text


def _mac(text: str) -> bytes:
    if len(text) != _MAC_HEX_CHARS:
        raise SignatureError(_form_error())
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise SignatureError(f"header {SIGNATURE_HEADER!r}: the MAC is not hex") from None


def verify(signature: Signature, value: bytes, topic: str, key_hash: bytes) -> bool:
    """Whether `signature` signs `value` on `topic` under the key whose stored digest is
    `key_hash` (form 1: the value alone)."""
    if signature.message_id is None or signature.signed_at_ms is None:
        signed = value
    else:
        signed = _signed_bytes(value, topic, signature.message_id, signature.signed_at_ms)
    expected = hmac.new(key_hash, signed, hashlib.sha256).digest()
    return hmac.compare_digest(expected, signature.mac)
