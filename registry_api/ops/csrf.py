"""CSRF tokens for the operators' state-changing requests (`POST /v1/ops/…`).

The page authenticates with a Bearer header, which a cross-site form or image cannot send;
the token is a second, independent check (issue 51): the page gets one from
`GET /v1/ops/csrf` and echoes it in the `X-CSRF-Token` header of every request that changes
something. A request without it, or with one not issued to the same operator key by this
process, changes nothing and gets a 403.

A token is `<issued, unix s>.<HMAC-SHA256 over the key's digest and the instant>` under the
deployment's CSRF secret (`cluster_secrets` 'csrf', migration 0016), which every registry of
the deployment reads at start: it names no key, lasts `TOKEN_TTL_S`, and any registry behind
the same address accepts it. Without that row (a database older than 0016, an app built by a
test) the secret is drawn when the process starts; a restart then refuses the token, and the
page asks for a fresh one and tries once more.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

from tickwheel.registry_api.store import hash_key

HEADER = "X-CSRF-Token"
TOKEN_TTL_S = 12 * 3600


class CsrfTokens:
    """Issues and checks tokens bound to one operator key, under this process's secret."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret or secrets.token_bytes(32)

    def _mac(self, key: str, issued_s: int) -> str:
        message = hash_key(key) + f"|{issued_s}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def issue(self, key: str, now_s: int | None = None) -> str:
        issued = int(time.time()) if now_s is None else now_s
        return f"{issued}.{self._mac(key, issued)}"

    def valid(self, key: str, token: str | None, now_s: int | None = None) -> bool:
        if not token:
            return False
        issued_text, _, mac = token.partition(".")
        if not issued_text.isdigit() or len(issued_text) > 12:
            return False
        issued = int(issued_text)
        now = int(time.time()) if now_s is None else now_s
        if not issued - 60 <= now <= issued + TOKEN_TTL_S:
            return False
        return hmac.compare_digest(mac, self._mac(key, issued))
