"""Call-time target checks: the allowlist match and the refused address ranges."""

from __future__ import annotations

import ipaddress

import pytest

from tickwheel.workers.targets import address_permitted, allowlist_entry, special_address

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
