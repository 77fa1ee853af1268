"""Call-time target checks: the allowlist match, the refused address ranges, and how
responses, redirects and the breaker decide a call."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tickwheel.workers.handlers import PermanentError
from tickwheel.workers.targets import (
    Address,
    Gate,
    HttpTargets,
    RetryableTargetError,
    TargetPolicy,
    address_permitted,
    allowlist_entry,
    same_origin,
    special_address,
)

pytestmark = pytest.mark.unit

ALLOW = ("https://hooks.example.com/tw", "http://127.0.0.1:8081/", "http://localhost:9000/")


@pytest.mark.parametrize(
    ("url", "entry"),
    [
        ("https://hooks.example.com/tw", ALLOW[0]),
        ("https://hooks.example.com/tw/a?x=1", ALLOW[0]),
        ("https://hooks.example.com:443/tw/a", ALLOW[0]),
        ("https://hooks.example.com/twx", None),
        ("https://hooks.example.com/tw/../admin", None),
        ("https://hooks.example.com/tw/%2e%2e/admin", None),
        ("http://hooks.example.com/tw", None),
        ("https://evil.example.com/tw", None),
        ("http://127.0.0.1:8081/anything", ALLOW[1]),
        ("http://127.0.0.1:8082/", None),
        ("ftp://127.0.0.1:8081/", None),
        ("http://169.254.169.254/latest/meta-data", None),
    ],
)
def test_allowlist_entry(url: str, entry: str | None) -> None:
    """scheme, host and port equal, path at or under the entry's, no dot segments"""
    assert allowlist_entry(url, ALLOW) == entry


@pytest.mark.parametrize(
    ("address", "special"),
    [
        ("127.0.0.1", True),
        ("::1", True),
        ("169.254.169.254", True),
        ("fe80::1", True),
        ("fd00:ec2::254", True),
        ("100.100.100.200", True),
        ("0.0.0.0", True),
        ("::ffff:127.0.0.1", True),
        ("224.0.0.1", True),
        ("93.184.216.34", False),
        ("10.1.2.3", False),
        ("2001:db8::1", False),
    ],
)
def test_special_addresses(address: str, special: bool) -> None:
    """loopback, link-local, metadata, unspecified, multicast (also IPv4-mapped) are special"""
    assert special_address(ipaddress.ip_address(address)) is special


def test_special_address_needs_an_entry_naming_it() -> None:
    """a loopback address passes only under an entry naming it (or localhost); metadata never
    passes under an entry for a DNS name (rebinding)"""
    loop = ipaddress.ip_address("127.0.0.1")
    assert address_permitted(loop, ALLOW[1])
    assert address_permitted(loop, ALLOW[2])
    assert not address_permitted(loop, ALLOW[0])
    assert not address_permitted(ipaddress.ip_address("169.254.169.254"), ALLOW[0])
    assert not address_permitted(ipaddress.ip_address("127.0.0.2"), ALLOW[1])
    assert address_permitted(ipaddress.ip_address("93.184.216.34"), ALLOW[0])


# --- HttpTargets over a stub transport: the decisions, not the network (the integration test
# calls a real local server) --------------------------------------------------------------------

POLICY = TargetPolicy(allowlist=("https://hooks.example.com/", "https://rebound.example.com/"))
ADDRESSES = {
    "hooks.example.com": "93.184.216.34",
    "rebound.example.com": "169.254.169.254",
}


async def _resolve(host: str, _port: int) -> list[Address]:
    return [ipaddress.ip_address(ADDRESSES[host])]


def _targets(
    respond: Callable[[httpx.Request], httpx.Response], gate: Gate | None = None
) -> tuple[HttpTargets, list[Any]]:
    """HttpTargets over a stub transport; its gate one that never waits unless given."""
    gate = gate or _open_gate()
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return respond(request)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return HttpTargets(POLICY, gate, client=client, resolve=_resolve), seen


TARGET = {"url": "https://hooks.example.com/tw/invoice", "method": "POST"}


async def test_request_goes_to_checked_address_with_name_and_idempotency_key() -> None:
    """the request is pinned to the resolved address; Host and the run key are sent"""
    targets, seen = _targets(lambda _r: httpx.Response(204))
    await targets.call(TARGET, {"n": 1}, "acme/inv@1")
    (request,) = seen
    assert request.url.host == "93.184.216.34" and request.url.path == "/tw/invoice"
    assert request.headers["host"] == "hooks.example.com"
    assert request.headers["idempotency-key"] == "acme/inv@1"
    assert request.extensions["sni_hostname"] == "hooks.example.com"
    assert request.content == b'{"n":1}'


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (408, RetryableTargetError),
        (429, RetryableTargetError),
        (500, RetryableTargetError),
        (503, RetryableTargetError),
        (400, PermanentError),
        (404, PermanentError),
        (410, PermanentError),
    ],
)
async def test_status_semantics(status: int, error: type[Exception]) -> None:
    """408, 429 and 5xx are retryable; other 4xx are permanent"""
    targets, _ = _targets(lambda _r: httpx.Response(status))
    with pytest.raises(error, match=f"HTTP {status}"):
        await targets.call(TARGET, {}, "acme/inv@1")


async def test_redirect_to_a_name_resolving_to_metadata_is_refused() -> None:
    """an allowlisted name that resolves to 169.254.169.254 is refused at call time, on the
    redirect hop, before any request goes there"""
    targets, seen = _targets(
        lambda r: (
            httpx.Response(307, headers={"location": "https://rebound.example.com/x"})
            if r.url.host == "93.184.216.34"
            else httpx.Response(200)
        )
    )
    with pytest.raises(PermanentError, match=r"169\.254\.169\.254"):
        await targets.call(TARGET, {}, "acme/inv@1")
    assert [r.url.host for r in seen] == ["93.184.216.34"]


async def test_redirect_outside_the_allowlist_is_refused() -> None:
    """a Location outside the allowlist ends the run permanently"""
    targets, seen = _targets(
        lambda _r: httpx.Response(302, headers={"location": "http://10.0.0.1/admin"})
    )
    with pytest.raises(PermanentError, match="not in the operator's allowlist"):
        await targets.call(TARGET, {}, "acme/inv@1")
    assert len(seen) == 1


@pytest.mark.parametrize("status", [502, 429])
async def test_open_breaker_fails_fast_without_calling(
    make_limiter: Callable[..., Any], status: int
) -> None:
    """after K consecutive 5xx (or 429: the host says too many) the host gets no request until
    the cool-down"""
    limiter, hosts = make_limiter(failures=2)
    targets, seen = _targets(lambda _r: httpx.Response(status), limiter)
    for _ in range(2):
        with pytest.raises(RetryableTargetError, match=f"HTTP {status}"):
            await targets.call(TARGET, {}, "acme/inv@1")
    statements = len(hosts.statements)
    with pytest.raises(RetryableTargetError, match="circuit open"):
        await targets.call(TARGET, {}, "acme/inv@1")
    assert len(seen) == 2
    assert len(hosts.statements) == statements  # failed fast from the cache: no round trip


class _OpenGate:
    """A gate that never waits and keeps no breaker: the tests of checks and redirects."""

    async def slot(self, host: str, port: int) -> str:
        return f"{host}:{port}"

    async def share(self, job: str, rate_per_s: float, burst: int) -> None:
        pass

    async def failed(self, key: str) -> None:
        pass

    async def succeeded(self, key: str) -> None:
        pass


def _open_gate() -> Gate:
    return _OpenGate()


SECRET_HEADERS = {"Authorization": "Bearer s3cret", "X-Api-Key": "k3y", "Accept": "text/plain"}


@pytest.mark.parametrize(
    ("location", "keeps"),
    [
        ("https://hooks.example.com/tw/next", True),
        ("/tw/relative", True),
        ("https://hooks.example.com:8443/tw", False),
        ("https://other.example.com/tw", False),
        ("http://hooks.example.com/tw", False),
    ],
    ids=["same-origin", "relative", "other-port", "other-host", "https-to-http"],
)
async def test_a_redirect_to_another_origin_carries_none_of_the_targets_headers(
    location: str, keeps: bool
) -> None:
    """issue 28 finding 6: the job's headers (Authorization and any other) follow a redirect
    only within the job URL's origin; a hop to another allowlisted host, port or scheme gets
    none of them, the run key still"""
    policy = TargetPolicy(
        allowlist=(
            "https://hooks.example.com/",
            "https://hooks.example.com:8443/",
            "https://other.example.com/",
            "http://hooks.example.com/",
        )
    )
    seen: list[httpx.Request] = []

    def respond(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if len(seen) == 1:
            return httpx.Response(307, headers={"location": location})
        return httpx.Response(204)

    async def resolve(host: str, _port: int) -> list[Address]:
        return [
            ipaddress.ip_address("93.184.216.34" if host.startswith("hooks") else "93.184.216.35")
        ]

    client = httpx.AsyncClient(transport=httpx.MockTransport(respond))
    targets = HttpTargets(policy, _open_gate(), client=client, resolve=resolve)
    await targets.call({**TARGET, "headers": SECRET_HEADERS}, {}, "acme/inv@1")
    first, hop = seen
    assert first.headers["authorization"] == "Bearer s3cret"
    for name, value in SECRET_HEADERS.items():
        assert (hop.headers.get(name) == value) is keeps, (name, dict(hop.headers))
    assert hop.headers["idempotency-key"] == "acme/inv@1"


@pytest.mark.parametrize(
    ("first", "hop", "same"),
    [
        ("https://a.example/x", "https://a.example:443/y", True),
        ("http://a.example/x", "https://a.example/y", True),
        ("http://a.example:8080/x", "https://a.example/y", False),
        ("https://a.example/x", "http://a.example/y", False),
        ("https://a.example/x", "https://A.EXAMPLE/y", True),
        ("https://a.example/x", "https://b.example/y", False),
    ],
)
def test_same_origin(first: str, hop: str, same: bool) -> None:
    """an origin is scheme, host and port; http → https on the same host is an upgrade"""
    assert same_origin(first, hop) is same


@pytest.mark.parametrize(
    ("address", "entry", "permitted"),
    [
        ("10.1.2.3", "https://hooks.example.com/", False),
        ("172.16.0.1", "https://hooks.example.com/", False),
        ("172.31.255.254", "https://hooks.example.com/", False),
        ("192.168.1.1", "https://hooks.example.com/", False),
        ("fd12:3456::1", "https://hooks.example.com/", False),
        ("::ffff:10.1.2.3", "https://hooks.example.com/", False),
        ("172.32.0.1", "https://hooks.example.com/", True),
        ("10.1.2.3", "https://hooks.example.com/ 10.0.0.0/8", True),
        ("10.1.2.3", "https://hooks.example.com/ 10.1.2.0/24 fd00::/8", True),
        ("::ffff:10.1.2.3", "https://hooks.example.com/ 10.1.2.0/24", True),
        ("10.1.3.3", "https://hooks.example.com/ 10.1.2.0/24", False),
        ("fd12:3456::1", "https://hooks.example.com/ fd12::/16", True),
        ("192.168.1.1", "https://hooks.example.com/ 10.0.0.0/8", False),
        ("10.9.9.9", "http://10.9.9.9:8080/", True),
    ],
)
def test_private_addresses_need_an_entry_naming_their_range(
    address: str, entry: str, permitted: bool
) -> None:
    """issue 28 (low): an allowlisted name resolving into 10/8, 172.16/12, 192.168/16 or
    fc00::/7 is refused unless its entry names a range holding the address (or the address
    itself as the entry's host)"""
    assert address_permitted(ipaddress.ip_address(address), entry) is permitted


async def test_a_name_resolving_to_a_private_address_is_refused_at_call_time() -> None:
    """issue 28 (low): a target whose allowlisted public name resolves to 10.0.0.5 is refused
    permanently before any request is sent; under an entry naming 10.0.0.0/8 it is called"""
    seen: list[httpx.Request] = []

    def respond(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(204)

    async def resolve(_host: str, _port: int) -> list[Address]:
        return [ipaddress.ip_address("10.0.0.5")]

    def targets(entry: str) -> HttpTargets:
        policy = TargetPolicy((entry,))
        client = httpx.AsyncClient(transport=httpx.MockTransport(respond))
        return HttpTargets(policy, _open_gate(), client=client, resolve=resolve)

    with pytest.raises(PermanentError, match=r"10\.0\.0\.5, .*private"):
        await targets("https://hooks.example.com/").call(TARGET, {}, "acme/inv@1")
    assert seen == []
    await targets("https://hooks.example.com/ 10.0.0.0/8").call(TARGET, {}, "acme/inv@1")
    assert [r.url.host for r in seen] == ["10.0.0.5"]


def test_an_entry_with_a_range_still_matches_its_url() -> None:
    """the ranges after an entry's URL do not change which URLs it allows"""
    entry = "https://hooks.example.com/tw 10.0.0.0/8"
    assert allowlist_entry("https://hooks.example.com/tw/x", [entry]) == entry
    assert allowlist_entry("https://hooks.example.com/other", [entry]) is None


async def test_a_target_with_its_own_limit_waits_for_the_job_then_the_host() -> None:
    """a job's `target.limit` is asked for (as the job's share, by run key) before the host's
    slot; a job without one never is"""
    asked: list[tuple[str, Any]] = []

    class Recording(_OpenGate):
        async def slot(self, host: str, port: int) -> str:
            asked.append(("slot", host))
            return await super().slot(host, port)

        async def share(self, job: str, rate_per_s: float, burst: int) -> None:
            asked.append(("share", (job, rate_per_s, burst)))

    targets, _ = _targets(lambda _r: httpx.Response(204), Recording())
    limited = {**TARGET, "limit": {"rate_per_s": 5, "burst": 2}}
    await targets.call(limited, {}, "acme/inv@1")
    await targets.call(TARGET, {}, "acme/inv@2")
    assert asked == [
        ("share", ("acme/inv", 5.0, 2)),
        ("slot", "hooks.example.com"),
        ("slot", "hooks.example.com"),
    ]


async def test_the_request_carries_the_templated_key_when_the_target_has_a_rule() -> None:
    """a job's `idempotency_key_template` (the rule the registry puts in the run's target, with
    the job's zone) makes the key; a hop of a redirect sends the same one"""
    rule = {"template": "{tenant}-{job}-{scheduled:%Y-%m-%d}", "timezone": "Asia/Tokyo"}
    # 2027-01-15T20:00Z is already the 16th in Tokyo
    run = "acme/inv@1800043200000"
    targets, seen = _targets(lambda _r: httpx.Response(204))
    await targets.call({**TARGET, "idempotency_key": rule}, {}, run)
    await targets.call(TARGET, {}, run)
    assert [r.headers["idempotency-key"] for r in seen] == ["acme-inv-2027-01-16", run]


async def test_a_rule_that_cannot_make_a_key_fails_the_run_permanently() -> None:
    """only a hand-written row gets here (the registry checks templates): no retry helps, and
    nothing is sent"""
    targets, seen = _targets(lambda _r: httpx.Response(204))
    bad_rules: list[tuple[dict[str, Any], str]] = [
        ({"template": "{nope}", "timezone": "UTC"}, "unknown placeholder"),
        ({"template": "{job}"}, "timezone"),
        ({"template": "{job}", "timezone": "Mars/Base"}, "idempotency_key"),
    ]
    for rule, words in bad_rules:
        with pytest.raises(PermanentError, match=words):
            await targets.call({**TARGET, "idempotency_key": rule}, {}, "acme/inv@1")
    assert seen == []
