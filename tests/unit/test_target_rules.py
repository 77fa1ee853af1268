"""HTTP target checks (registry_api/targets.py): the URL as servers read it, strict headers."""

from __future__ import annotations

import pytest

from tickwheel.target_rules import (
    HEADERS_MAX,
    HEADERS_MAX_BYTES,
    TargetError,
    check_headers,
    check_target_url,
)

pytestmark = pytest.mark.unit

ALLOW = ("https://hooks.example.test/hooks",)


@pytest.mark.parametrize(
    ("url", "normal"),
    [
        ("https://hooks.example.test/hooks", "https://hooks.example.test/hooks"),
        ("https://hooks.example.test/hooks/", "https://hooks.example.test/hooks/"),
        (
            "https://hooks.example.test/hooks/a/b?x=1&y=2",
            "https://hooks.example.test/hooks/a/b?x=1&y=2",
        ),
        ("HTTPS://Hooks.Example.TEST:443/hooks/x", "https://hooks.example.test/hooks/x"),
        ("https://hooks.example.test/hooks/a%20b", "https://hooks.example.test/hooks/a%20b"),
    ],
)
def test_allowed_urls_come_back_normalised(url: str, normal: str) -> None:
    """a URL below an allowlist entry passes, scheme/host lower-cased and default port dropped"""
    assert check_target_url(url, ALLOW) == normal


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("https://user:secret@hooks.example.test/hooks/x", "credentials"),
        ("https://user@hooks.example.test/hooks/x", "credentials"),
        ("https://hooks.example.test/hooks/x\r\nX-Injected: 1", "control characters"),
        ("https://hooks.example.test/hooks/x\n", "control characters"),
        ("https://hooks.example.test/hooks/\x00", "control characters"),
        ("https://hooks.example.test/hooks/a b", "no spaces"),
        ("https://hooks.example.test/hooks/..%2fadmin", "encoded '/'"),
        ("https://hooks.example.test/hooks/..%2Fadmin", "encoded '/'"),
        ("https://hooks.example.test/hooks/..%5cadmin", "encoded '/'"),
        ("https://hooks.example.test/hooks/%2e%2e/admin", "'..' path segments"),
        ("https://hooks.example.test/hooks/%2E%2e/admin", "'..' path segments"),
        ("https://hooks.example.test/hooks/.%2e/admin", "'..' path segments"),
        ("https://hooks.example.test/hooks/../admin", "'..' path segments"),
        ("https://hooks.example.test/hooks/./x", "'..' path segments"),
        ("https://hooks.example.test/hooks/..;/admin", "'..' path segments"),
        ("https://hooks.example.test/hooks/..;jsessionid=1/admin", "'..' path segments"),
        ("https://hooks.example.test/hooks/%252e%252e/admin", "'..' path segments"),
        ("https://hooks.example.test/hooks\\..\\admin", "backslash"),
        ("https://hooks.example.test/hooks/x#frag", "fragment"),
        ("https://hooks.example.test/hooksevil", "allowlist"),
        ("https://hooks.example.test/", "allowlist"),
        ("http://hooks.example.test/hooks/x", "allowlist"),
        ("https://hooks.example.test:8443/hooks/x", "allowlist"),
        ("https://evil.test/hooks/x", "allowlist"),
        ("https://hooks.example.test.evil.test/hooks/x", "allowlist"),
        ("ftp://hooks.example.test/hooks/x", "absolute http(s) URL"),
        ("/hooks/x", "absolute http(s) URL"),
        ("https://hooks.example.test:99999/hooks", "absolute http(s) URL"),
        ("https://[::1/hooks", "absolute http(s) URL"),
        ("https://hooks.exämple.test/hooks", "visible ASCII"),
        ("https://hooks_example.test/hooks", "invalid host name"),
    ],
)
def test_refused_urls_say_why(url: str, words: str) -> None:
    """credentials, controls, encoded traversal and anything outside the allowlist are refused"""
    with pytest.raises(TargetError) as caught:
        check_target_url(url, ALLOW)
    assert caught.value.field == "target.url"
    assert words in caught.value.message


def test_root_entry_allows_the_whole_origin_and_bad_entries_allow_nothing() -> None:
    """an entry of `/` allows every path of its origin; an invalid entry allows nothing"""
    assert check_target_url("https://a.test/x/y", ("https://a.test/",)) == "https://a.test/x/y"
    assert check_target_url("https://a.test", ("https://a.test",)) == "https://a.test/"
    with pytest.raises(TargetError):
        check_target_url("https://a.test/x", ("https://user:pw@a.test/", "not a url"))


def test_entry_with_trailing_slash_matches_on_segment_boundary() -> None:
    """`/hooks/` and `/hooks` allow the same URLs: `/hooks`, `/hooks/…`, never `/hooksx`"""
    for entry in ("https://a.test/hooks/", "https://a.test/hooks"):
        assert check_target_url("https://a.test/hooks/x", (entry,))
        assert check_target_url("https://a.test/hooks", (entry,))
        with pytest.raises(TargetError):
            check_target_url("https://a.test/hooksx", (entry,))


def test_good_headers_pass() -> None:
    """token names and visible ASCII values (with spaces and tabs) are allowed"""
    check_headers({"Authorization": "Bearer abc", "X-Trace_id.1": "a\tb c", "Accept": ""})


@pytest.mark.parametrize(
    ("headers", "field", "words"),
    [
        ({"X-A": "a\r\nX-B: injected"}, "target.headers.X-A", "no CR, LF"),
        ({"X-A": "a\x00"}, "target.headers.X-A", "no CR, LF"),
        ({"X-A": "é"}, "target.headers.X-A", "visible ASCII"),
        ({"X A": "1"}, "target.headers.X A", "valid header name"),
        ({"X-A\r\nHost": "1"}, "target.headers.X-A\r\nHost", "valid header name"),
        ({"": "1"}, "target.headers.", "valid header name"),
        ({"X:A": "1"}, "target.headers.X:A", "valid header name"),
        ({"Host": "admin.internal"}, "target.headers.Host", "may not be set"),
        ({"host": "admin.internal"}, "target.headers.host", "may not be set"),
        ({"Connection": "close"}, "target.headers.Connection", "may not be set"),
        ({"Transfer-Encoding": "chunked"}, "target.headers.Transfer-Encoding", "may not be set"),
        ({"Content-Length": "0"}, "target.headers.Content-Length", "may not be set"),
        ({"Idempotency-Key": "x"}, "target.headers.Idempotency-Key", "may not be set"),
        ({"X-A": "1", "x-a": "2"}, "target.headers.x-a", "given twice"),
    ],
)
def test_refused_headers_name_the_header(headers: dict[str, str], field: str, words: str) -> None:
    """invalid names, CR/LF in values, hop-by-hop and Host headers are refused by name"""
    with pytest.raises(TargetError) as caught:
        check_headers(headers)
    assert caught.value.field == field
    assert words in caught.value.message


def test_headers_are_bounded_in_number_and_size() -> None:
    """at most HEADERS_MAX headers and HEADERS_MAX_BYTES of names and values"""
    check_headers({f"X-{i}": "v" for i in range(HEADERS_MAX)})
    with pytest.raises(TargetError, match=f"at most {HEADERS_MAX}"):
        check_headers({f"X-{i}": "v" for i in range(HEADERS_MAX + 1)})
    check_headers({"X-Big": "v" * (HEADERS_MAX_BYTES - len("X-Big"))})
    with pytest.raises(TargetError, match=f"at most {HEADERS_MAX_BYTES}"):
        check_headers({"X-Big": "v" * (HEADERS_MAX_BYTES - len("X-Big") + 1)})


@pytest.mark.parametrize("headers", [{"X-A": "value\n"}, {"X-A\n": "1"}, {"X-A": "value\r"}])
def test_a_trailing_line_break_is_no_loophole(headers: dict[str, str]) -> None:
    """a name or value ending in a line break is refused (no `$`-before-newline slip)"""
    with pytest.raises(TargetError):
        check_headers(headers)


@pytest.mark.parametrize(
    "segment",
    ["%25252e%25252e", "%2525252e%2525252E", "%25252e", "..%25252f", "%252525252e."],
)
def test_dot_segments_are_refused_however_often_encoded(segment: str) -> None:
    """issue 28 (low): '..' (or an encoded '/') percent-encoded three times and more passed
    the check, which decoded twice; a segment is decoded until nothing changes"""
    with pytest.raises(TargetError):
        check_target_url(f"https://hooks.example.test/hooks/{segment}/admin", ALLOW)
