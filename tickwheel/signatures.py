"""Signed registrations: a producer proves which tenant's API key it holds, without sending it.

A registration produced to `<prefix>.registrations` may carry the header

    tickwheel-signature: <key prefix>:<HMAC-SHA256 of the message value, hex>

where the MAC's secret is SHA-256 of the API key — the digest the registry stores for the key
(`api_keys.key_hash`) — and the prefix is the key's first `PREFIX_CHARS` characters, which the
registry stores in clear to name it. The registry finds the key by its prefix and verifies the
MAC over the exact bytes of the value without ever holding the key, and the key itself never
travels: a key inside the message would be kept by the topic and quoted, with the rest of the
original, on the rejected topic.

Pure functions; `sign` is what a producing service calls (it needs no connection to anything).
"""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "tickwheel-signature"
PREFIX_CHARS = 10  # leading characters of a key stored in clear (registry_api/store.py)
_MAC_HEX_CHARS = 64


class SignatureError(ValueError):
    """A signature header that cannot even be read; the message is rejected with this text."""


def key_digest(api_key: str) -> bytes:
    """SHA-256 of an API key: what the registry stores, and the MAC's secret."""
    return hashlib.sha256(api_key.encode()).digest()


def sign(value: bytes, api_key: str) -> tuple[str, bytes]:
    """The header (name, value) that signs `value` with `api_key`, for `produce(headers=...)`."""
    mac = hmac.new(key_digest(api_key), value, hashlib.sha256).hexdigest()
    return SIGNATURE_HEADER, f"{api_key[:PREFIX_CHARS]}:{mac}".encode()


def parse(header: bytes | str | None) -> tuple[str, bytes]:
    """(key prefix, MAC) of a signature header's value; SignatureError if malformed."""
    if header is None:
        raise SignatureError(f"header {SIGNATURE_HEADER!r} is empty")
    text = header.decode("ascii", "replace") if isinstance(header, bytes) else header
    prefix, sep, mac = text.rpartition(":")
    if (
        not sep
        or len(prefix) != PREFIX_CHARS
        or not all(c.isalnum() or c in "_-" for c in prefix)
        or len(mac) != _MAC_HEX_CHARS
    ):
        raise SignatureError(
            f"header {SIGNATURE_HEADER!r} must be '<the key's first {PREFIX_CHARS} "
            f"characters>:<{_MAC_HEX_CHARS} hex digits of HMAC-SHA256>'"
        )
    try:
        return prefix, bytes.fromhex(mac)
    except ValueError:
        raise SignatureError(f"header {SIGNATURE_HEADER!r}: the MAC is not hex") from None


def verify(value: bytes, mac: bytes, key_hash: bytes) -> bool:
    """Whether `mac` signs `value` under the key whose stored digest is `key_hash`."""
    expected = hmac.new(key_hash, value, hashlib.sha256).digest()
    return hmac.compare_digest(expected, mac)
