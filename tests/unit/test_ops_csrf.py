"""The operators' CSRF tokens (registry_api/ops/csrf.py): bound to one operator key and one
process's secret, for a bounded time."""

from __future__ import annotations

import pytest

from tickwheel.registry_api.ops.csrf import TOKEN_TTL_S, CsrfTokens

pytestmark = pytest.mark.unit

NOW = 1_800_000_000


def test_a_token_is_valid_for_its_key_only() -> None:
    """a token issued for one key passes for it and for no other key"""
    tokens = CsrfTokens()
    token = tokens.issue("twop_alice", NOW)
    assert tokens.valid("twop_alice", token, NOW)
    assert not tokens.valid("twop_bob", token, NOW)


def test_another_process_or_a_tampered_token_is_refused() -> None:
    """another secret (a restarted registry), a changed instant or MAC, garbage: refused"""
    tokens = CsrfTokens()
    token = tokens.issue("twop_alice", NOW)
    issued, _, mac = token.partition(".")
    assert not CsrfTokens().valid("twop_alice", token, NOW)
    assert not tokens.valid("twop_alice", f"{int(issued) + 1}.{mac}", NOW)
    assert not tokens.valid("twop_alice", f"{issued}.{'0' * len(mac)}", NOW)
    for bad in (None, "", ".", "x.y", f"-1.{mac}", mac, "9" * 40 + "." + mac):
        assert not tokens.valid("twop_alice", bad, NOW)


def test_a_token_expires() -> None:
    """a token lasts TOKEN_TTL_S and is not taken from the future"""
    tokens = CsrfTokens(secret=b"s" * 32)
    token = tokens.issue("twop_alice", NOW)
    assert tokens.valid("twop_alice", token, NOW + TOKEN_TTL_S)
    assert not tokens.valid("twop_alice", token, NOW + TOKEN_TTL_S + 1)
    assert not tokens.valid("twop_alice", token, NOW - 3600)
