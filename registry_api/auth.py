"""Bearer API keys → tenants: parsing the `Authorization` header and a short positive cache.

Keys are random secrets stored hashed (store.py); every lookup is one indexed read. A tenant's
requests would otherwise pay that read each time, so known keys are remembered for
`KEY_CACHE_TTL_S`. Only positive answers are cached: a key created a moment ago works at once,
and a revoked key keeps working for at most the TTL. Keys are never logged.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

KEY_CACHE_TTL_S = 30.0  # seconds a known key is trusted without asking the database again
KEY_CACHE_MAX = 10_000  # entries; only valid keys get in, so this bounds memory, not traffic
API_KEY_MAX_CHARS = 512  # longer "keys" are refused before any lookup


class AuthProblem(Exception):
    """Why a request is not authenticated: `detail` is one sentence for the 401 body."""

    def __init__(self, detail: str, *, invalid_token: bool) -> None:
        super().__init__(detail)
        self.detail = detail
        # RFC 6750 §3: a request without credentials gets a bare challenge; one whose
        # credentials were refused gets error="invalid_token" (or invalid_request).
        self.challenge = 'Bearer error="invalid_token"' if invalid_token else "Bearer"


def bearer_key(header: str | None) -> str:
    """The API key in an `Authorization: Bearer <key>` header; AuthProblem otherwise."""
    if header is None or not header.strip():
        raise AuthProblem(
            "this endpoint needs an API key: send the header 'Authorization: Bearer <key>'",
            invalid_token=False,
        )
    scheme, _, key = header.strip().partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key or " " in key or len(key) > API_KEY_MAX_CHARS:
        raise AuthProblem(
            "the Authorization header must have the form 'Bearer <key>' with the tenant's API key",
            invalid_token=True,
        )
    return key


class KeyCache:
    """Positive key → tenant lookups, kept for `ttl_s` seconds of `clock` (monotonic)."""

    def __init__(
        self,
        lookup: Callable[[str], Awaitable[str | None]],
        *,
        ttl_s: float = KEY_CACHE_TTL_S,
        max_entries: int = KEY_CACHE_MAX,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lookup = lookup
        self._ttl_s = ttl_s
        self._max = max_entries
        self._clock = clock
        self._known: dict[str, tuple[str, float]] = {}  # key → (tenant, expires at)

    async def tenant(self, api_key: str) -> str | None:
        """The key's tenant, or None for an unknown or revoked key."""
        now = self._clock()
        hit = self._known.get(api_key)
        if hit is not None and hit[1] > now:
            return hit[0]
        tenant = await self._lookup(api_key)
        if tenant is None:
            self._known.pop(api_key, None)
            return None
        if len(self._known) >= self._max:
            self._known = {k: v for k, v in self._known.items() if v[1] > now}
            if len(self._known) >= self._max:
                self._known.clear()
        self._known[api_key] = (tenant, now + self._ttl_s)
        return tenant


async def authenticate(header: str | None, keys: KeyCache) -> str:
    """The tenant a request's `Authorization` header names; AuthProblem when it names none."""
    tenant = await keys.tenant(bearer_key(header))
    if tenant is None:
        raise AuthProblem("the API key is not valid (unknown or revoked)", invalid_token=True)
    return tenant
