"""HTTP targets: one POST (or the job's method) per run, with the checks made at call time.

A job may name `"target": {"url", "method", "headers"}` instead of a handler. For each hop
(the first request and every redirect, followed here by hand, at most MAX_REDIRECTS):

    1. the URL must match an entry of the operator's allowlist (`TICKWHEEL_TARGET_ALLOWLIST`),
       checked again now: the list may have shrunk since the job was registered, and a
       redirect may point anywhere;
    2. the host is resolved, and every address it resolves to must be an ordinary one: a
       loopback, link-local (which includes the cloud metadata address 169.254.169.254),
       unspecified, multicast or reserved address, or a known metadata address, is refused
       unless the matching allowlist entry names that very address (or `localhost` for
       loopback) or a range holding it; a private address (10/8, 172.16/12, 192.168/16,
       fc00::/7) likewise, unless the entry names it or a range holding it (`https://billing.
       internal/ 10.20.0.0/16`): an allowlisted public name whose DNS answers with an address
       inside our network must not reach it by default. The request then goes to the checked
       address (the Host header and TLS SNI keep the name), so a second DNS answer cannot
       swap in another address (DNS rebinding);
    3. the host's cluster-wide rate gives the pace (waiting for a send instant, not failing)
       and its shared circuit breaker, when open, fails the call fast as retryable: both are
       the `Gate`'s, `workers/host_limits.py`, their state in Postgres for all workers; a 5xx,
       a 429, a timeout or a connection error counts as a failure of the host;
    4. the response decides: 2xx success; 3xx with Location: next hop; 408, 429, 5xx,
       timeouts and connection errors retryable; any other status permanent. A refused URL
       or address is permanent: retrying cannot make it allowed.

A hop to another origin (scheme, host or port) than the job's URL carries none of the job's
own headers (`target.headers`): they are where a job keeps its credentials (`Authorization`,
an API key header, cookies), meant for the host it names. Browsers, curl, requests and httpx
drop `Authorization` on such a redirect; we cannot tell which other header is a secret, so
every one of them stays behind. The one exception is the upgrade of the same host from http
to https on default ports (as httpx allows). `Idempotency-Key` is ours and always sent.

The request carries `Idempotency-Key: <run key>`, so a downstream can drop the second
delivery of an at-least-once run, or the key the job's `idempotency_key_template` makes of the
run (`tickwheel.idempotency_keys`; the target's `idempotency_key` rule, put there by the
registry with the job's zone). The body is the job's payload as JSON.

The allowlist match is the registry's own rule (`tickwheel.target_rules.matching_entry`): the URL
normalised, no credentials or dot segments (literal or encoded), scheme, host and port equal,
path at or below the entry's path on a segment boundary.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx
import orjson

from tickwheel.domain import parse_run_key
from tickwheel.idempotency_keys import TemplateError
from tickwheel.idempotency_keys import render as render_key
from tickwheel.target_rules import TargetError, entry_networks, matching_entry
from tickwheel.wire.job import RATE_LIMIT_MAX
from tickwheel.workers.handlers import PermanentError

MAX_REDIRECTS = 5
# Addresses that are not loopback or link-local by the ipaddress module's rules, yet serve
# instance metadata on some clouds (AWS IPv6, Alibaba).
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("fd00:ec2::254", "100.100.100.200")
)
# Private ranges (RFC 1918, and RFC 4193's unique local IPv6): a target may resolve into one
# only under an allowlist entry naming it.
PRIVATE_NETWORKS = tuple(
    ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")
)
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
RETRYABLE_STATUSES = frozenset({408, 429})
THROTTLED = 429  # a host saying "too many": a failure for its breaker, as a 5xx is

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[Address]]]  # host, port → its addresses


class RetryableTargetError(Exception):
    """The call failed in a way a later attempt may not (timeout, 5xx, 429, circuit open)."""


@dataclass(frozen=True)
class TargetPolicy:
    allowlist: tuple[str, ...]


class Gate(Protocol):
    """A host's rate and breaker (`workers/host_limits.py`: `HostLimiter`)."""

    async def slot(self, host: str, port: int) -> str:
        """Wait until the call may go; return the host's key. Raises RetryableTargetError
        while the host's breaker is open."""
        ...

    async def share(self, job: str, rate_per_s: float, burst: int) -> None:
        """Wait for an instant of a job's own rate (`target.limit`), before its host's."""
        ...

    async def failed(self, key: str) -> None: ...

    async def succeeded(self, key: str) -> None: ...


def allowlist_entry(url: str, allowlist: Sequence[str]) -> str | None:
    """The allowlist entry `url` falls under, or None: the registry's rule
    (tickwheel.target_rules), where a URL that is not acceptable at all (credentials, dot
    segments, …) matches nothing."""
    try:
        return matching_entry(url, allowlist)
    except TargetError:
        return None


def _port(parts: Any) -> int:
    return int(parts.port or (443 if parts.scheme == "https" else 80))


def same_origin(first: str, hop: str) -> bool:
    """Whether a redirect hop to `hop` may carry the headers meant for `first` (module
    docstring): same scheme, host and port, or the same host upgraded from http to https on
    the default ports."""
    try:
        a, b = urlsplit(first), urlsplit(hop)
        ports = _port(a), _port(b)
    except ValueError:
        return False
    scheme_a, scheme_b = a.scheme.lower(), b.scheme.lower()
    if a.hostname != b.hostname:
        return False
    if (scheme_a, ports[0]) == (scheme_b, ports[1]):
        return True
    return (scheme_a, scheme_b, ports) == ("http", "https", (80, 443))


def special_address(address: Address) -> bool:
    """Loopback, link-local, metadata and the like: never a target unless allowlisted."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return (
        address.is_loopback
        or address.is_link_local
        or address.is_unspecified
        or address.is_multicast
        or address.is_reserved
        or address in METADATA_ADDRESSES
    )


def private_address(address: Address) -> bool:
    """In one of PRIVATE_NETWORKS (also IPv4-mapped)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in PRIVATE_NETWORKS)


def address_permitted(address: Address, entry: str) -> bool:
    """May `address` be called under allowlist `entry`? (Step 2 of the module docstring.)"""
    if not special_address(address) and not private_address(address):
        return True
    forms = [address]
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        forms.append(address.ipv4_mapped)
    if any(form in network for network in entry_networks(entry) for form in forms):
        return True
    url = entry.split()[0] if entry.strip() else ""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return address.is_loopback or (
            isinstance(address, ipaddress.IPv6Address)
            and address.ipv4_mapped is not None
            and address.ipv4_mapped.is_loopback
        )
    try:
        return ipaddress.ip_address(host) == address
    except ValueError:
        return False


class HttpTargets:
    """Calls HTTP targets for one worker process: one client; each host's rate and breaker
    through the gate."""

    def __init__(
        self,
        policy: TargetPolicy,
        gate: Gate,
        client: httpx.AsyncClient | None = None,
        resolve: Resolver | None = None,
    ) -> None:
        self.policy = policy
        self.gate = gate
        self.resolve = resolve or _resolve
        self.client = client or httpx.AsyncClient(
            follow_redirects=False,
            trust_env=False,  # no proxy from the environment: we pinned the address
            timeout=None,  # the run's timeout_ms bounds the whole call (the executor's)
        )
        self._counting: set[asyncio.Task[None]] = set()  # failures of cancelled calls

    async def close(self) -> None:
        await self.client.aclose()

    async def call(self, target: dict[str, Any], payload: Any, run_key: str) -> None:
        """Deliver one run; return on success, raise PermanentError or RetryableTargetError."""
        url = target.get("url")
        if not isinstance(url, str):
            raise PermanentError("target.url is missing or not a string")
        method = str(target.get("method") or "POST").upper()
        extra = target.get("headers") or {}
        if not isinstance(extra, dict):
            raise PermanentError("target.headers must be an object of strings")
        limit = target.get("limit")
        if limit is not None:
            rate, burst = _limit_of(limit)
            await self.gate.share(run_key.rpartition("@")[0], rate, burst)
        idempotency_key = run_key
        rule = target.get("idempotency_key")
        if rule is not None:
            idempotency_key = _templated_key(rule, run_key)
        body: bytes | None = orjson.dumps(payload)
        origin = url
        for _hop in range(MAX_REDIRECTS + 1):
            headers = extra if same_origin(origin, url) else {}
            response = await self._send(url, method, headers, body, idempotency_key)
            status = response.status_code
            if status in REDIRECT_STATUSES and "location" in response.headers:
                url = urljoin(url, response.headers["location"])
                if status == 303 or (status in (301, 302) and method == "POST"):
                    method, body = "GET", None  # what browsers and httpx do
                continue
            if 200 <= status < 300:
                return
            reason = f"target answered HTTP {status} ({_host_of(url)})"
            if status in RETRYABLE_STATUSES or status >= 500:
                raise RetryableTargetError(reason)
            raise PermanentError(reason)
        raise PermanentError(f"target redirected more than {MAX_REDIRECTS} times")

    async def _send(
        self,
        url: str,
        method: str,
        extra: dict[str, Any],
        body: bytes | None,
        idempotency_key: str,
    ) -> httpx.Response:
        entry = allowlist_entry(url, self.policy.allowlist)
        if entry is None:
            raise PermanentError(
                f"target URL {url!r} is not in the operator's allowlist "
                "(TICKWHEEL_TARGET_ALLOWLIST)"
            )
        parts = urlsplit(url)
        host, port = parts.hostname or "", _port(parts)
        address = await self._checked_address(host, port, entry)
        key = await self.gate.slot(host, port)
        headers = {str(k): str(v) for k, v in extra.items()}
        headers["Idempotency-Key"] = idempotency_key
        headers["Host"] = parts.netloc.rpartition("@")[2]
        if body is not None:
            headers.setdefault("Content-Type", "application/json")
        literal = f"[{address}]" if address.version == 6 else str(address)
        pinned = urlunsplit((parts.scheme, f"{literal}:{port}", parts.path or "/", parts.query, ""))
        extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
        try:
            response = await self.client.request(
                method, pinned, headers=headers, content=body, extensions=extensions
            )
        except httpx.TimeoutException:
            await self.gate.failed(key)
            raise RetryableTargetError(f"target {host}:{port} timed out") from None
        except httpx.TransportError as exc:
            await self.gate.failed(key)
            raise RetryableTargetError(
                f"target {host}:{port} unreachable: {type(exc).__name__}: {exc}"
            ) from None
        except BaseException:  # cancelled by the run's timeout: a failure of this host too
            # Counted in a task of its own: this one is being cancelled.
            self._count_failure_later(key)
            raise
        if response.status_code >= 500 or response.status_code == THROTTLED:
            await self.gate.failed(key)
        else:
            await self.gate.succeeded(key)
        return response

    def _count_failure_later(self, key: str) -> None:
        task = asyncio.get_running_loop().create_task(self.gate.failed(key))
        self._counting.add(task)
        task.add_done_callback(self._counting.discard)

    async def _checked_address(self, host: str, port: int, entry: str) -> Address:
        try:
            literal: Address | None = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        if literal is not None:
            addresses = [literal]
        else:
            try:
                addresses = list(dict.fromkeys(await self.resolve(host, port)))
            except OSError as exc:
                raise RetryableTargetError(f"cannot resolve target host {host!r}: {exc}") from None
        refused = [a for a in addresses if not address_permitted(a, entry)]
        if refused or not addresses:
            raise PermanentError(
                f"target host {host!r} resolves to {refused[0] if refused else 'nothing'}, "
                "a loopback, link-local, metadata or private address that its allowlist "
                "entry does not name"
            )
        return addresses[0]


async def _resolve(host: str, port: int) -> list[Address]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [ipaddress.ip_address(info[4][0]) for info in infos]


def _templated_key(rule: Any, run_key: str) -> str:
    """The Idempotency-Key of `rule` (`RunTarget.idempotency_key`) for this run; a rule that
    cannot make one is permanent (the registry checked it, so only a hand-written row gets
    here)."""
    if not isinstance(rule, dict):
        raise PermanentError("target.idempotency_key must be an object")
    template, zone = rule.get("template"), rule.get("timezone")
    if not isinstance(template, str) or not isinstance(zone, str):
        raise PermanentError("target.idempotency_key needs a template and a timezone")
    try:
        tenant, job_id, scheduled_ms = parse_run_key(run_key)
        return render_key(template, tenant, job_id, scheduled_ms, zone)
    except (TemplateError, LookupError, ValueError) as exc:
        raise PermanentError(f"target.idempotency_key: {exc}") from None


def _limit_of(limit: Any) -> tuple[float, int]:
    """A stored `target.limit` (checked at registration) as (rate_per_s, burst)."""
    fields: dict[str, Any] = limit if isinstance(limit, dict) else {}
    rate, burst = fields.get("rate_per_s"), fields.get("burst", 1)
    if (
        isinstance(rate, (int, float))
        and not isinstance(rate, bool)
        and 0 < rate <= RATE_LIMIT_MAX
        and type(burst) is int
        and 1 <= burst <= RATE_LIMIT_MAX
    ):
        return float(rate), burst
    raise PermanentError("target.limit must hold a rate_per_s > 0 and a burst >= 1")


def _host_of(url: str) -> str:
    return urlsplit(url).netloc.rpartition("@")[2]
