"""Bearer API keys → tenants: parsing the `Authorization` header and a short positive cache.

Keys are random secrets stored hashed (store.py); every lookup is one indexed read. A tenant's
requests would otherwise pay that read each time, so known keys are remembered for
`KEY_CACHE_TTL_S`. Only positive answers are cached: a key created a moment ago works at once,
and a revoked key keeps working for at most the TTL. Keys are never logged.
"""

from __future__ import annotations

import ipaddress
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


# --- failed attempts, per client ----------------------------------------------------------------

FAILED_AUTH_BURST = 20  # failed authentications a client address may make at once
FAILED_AUTH_PER_S = 1.0  # ... and then this many per second (token bucket refill)
FAILED_AUTH_CLIENTS_MAX = 10_000  # addresses tracked; the fullest buckets are forgotten first
IPV6_CLIENT_PREFIX = 64  # bits: one IPv6 client is its /64 (one host's usual allocation)


def client_of(host: str | None) -> str:
    """Whose failures a request counts as: its IPv4 address, or the /64 network of its IPv6
    address — a single host is commonly given a whole /64, and counting each of its 2^64
    addresses apart would give it as many buckets."""
    if not host:
        return "unknown"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/{IPV6_CLIENT_PREFIX}", strict=False))
    return str(address)


class FailedAuthLimiter:
    """A token bucket per client (`client_of`), drawn only by failed authentications: a
    client that guesses keys is answered 429 (with Retry-After) before its guess is even
    looked up, while a client whose key works is never slowed down.

    At most `max_clients` buckets are kept. When a new client would exceed that, the half of
    the buckets holding the most tokens now (full ones first) is forgotten: forgetting a
    bucket gives its client a full one, which costs nothing for those nearly full and keeps
    the clients that failed most lately limited. (Forgetting every bucket, as before issue 28,
    let anyone with enough addresses reset the limit of the one that guesses.)
    """

    def __init__(
        self,
        *,
        burst: int = FAILED_AUTH_BURST,
        per_s: float = FAILED_AUTH_PER_S,
        max_clients: int = FAILED_AUTH_CLIENTS_MAX,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._burst = float(burst)
        self._per_s = per_s
        self._max = max_clients
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # client → (tokens, at)

    def _tokens(self, client: str, now: float) -> float:
        tokens, at = self._buckets.get(client, (self._burst, now))
        return min(self._burst, tokens + (now - at) * self._per_s)

    def retry_after_s(self, client: str) -> float:
        """0 when `client` may try to authenticate now, else seconds until it may."""
        tokens = self._tokens(client, self._clock())
        return 0.0 if tokens >= 1 else (1 - tokens) / self._per_s

    def failed(self, client: str) -> None:
        """Take a token from `client`'s bucket for a failed attempt."""
        now = self._clock()
        if client not in self._buckets and len(self._buckets) >= self._max:
            # Sorting once per max/2 new clients: O(log n) per failure, amortised.
            by_tokens = sorted(self._buckets, key=lambda c: self._tokens(c, now))
            self._buckets = {c: self._buckets[c] for c in by_tokens[: self._max // 2]}
        self._buckets[client] = (max(0.0, self._tokens(client, now) - 1), now)
