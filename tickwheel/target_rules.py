"""HTTP targets: which URLs and headers a job may ask a worker to send, checked strictly.

Pure functions, used at registration (`document.validate_job`) and again by workers at call
time, so that a rule tightened later also holds for jobs stored before:

    check_target_url(url, allowlist) -> the normalised URL, or TargetError
    check_headers(headers)           -> None, or TargetError

The allowlist holds URL prefixes chosen by the operator, each optionally followed by the
address ranges its host may resolve to when they are private (`https://billing.internal/hooks
10.20.0.0/16 fd12::/48`; see `workers/targets.py` for which addresses need that). What is
compared against it is the URL as a server will read it, never the raw string, so nothing
that a server or proxy would interpret differently from us may pass:

- only ASCII printable characters: no control characters (CR/LF would split the request line),
  no spaces, no backslashes (some servers read them as `/`);
- no credentials (`user:password@host`): they would be stored and echoed back, and a header
  is the place for a secret;
- no dot segments, literal or encoded (`..`, `%2e%2e`, `.%2E`, `..;/`), no encoded slash or
  backslash in the path (`..%2fadmin`), however many times encoded (`%252e`, `%25252e`: each
  segment is decoded until nothing changes, which takes at most one round per `%`): a server
  or a chain of proxies that decodes them would walk out of the allowed prefix;
- no fragment (never sent);
- scheme and host compared case-insensitively, the default port dropped, an empty path made
  `/`; then the path must equal an entry's path or continue it at a segment boundary
  (`/hooks` allows `/hooks` and `/hooks/x`, never `/hooksevil`).

Headers: RFC 7230 token names, values without control characters (tab allowed), no hop-by-hop
header and no `Host` (behind a virtual-host proxy a `Host` would pick another site than the
allowlisted URL names), none that tickwheel sets itself, at most HEADERS_MAX of them and
HEADERS_MAX_BYTES in total.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Mapping, Sequence
from urllib.parse import SplitResult, unquote, urlsplit

SCHEMES = {"http": 80, "https": 443}  # scheme → its default port
HEADERS_MAX = 32  # headers per target
HEADERS_MAX_BYTES = 8 * 1024  # bytes of all header names and values together
# Hop-by-hop headers (RFC 7230 §6.1, and the de-facto Keep-Alive/Proxy-Connection), the Host
# header, and those tickwheel sets on every call (the run key is the Idempotency-Key).
FORBIDDEN_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "idempotency-key",
    }
)

# Patterns are used with fullmatch: `$` would accept a trailing newline.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 7230 §3.2.6
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e]*")  # visible ASCII, space and tab
_URL_CHARS = re.compile(r"[\x21-\x7e]+")  # visible ASCII: no controls, no spaces
_HOST_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*")
_IPV6 = re.compile(r"[0-9a-f:.]+")
_ENCODED_SEPARATOR = re.compile(r"%(2f|5c)", re.IGNORECASE)


class TargetError(ValueError):
    """A target URL or header that is refused: the field (a dotted path) and why."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def _split(url: str, field: str) -> SplitResult:
    if not _URL_CHARS.fullmatch(url):
        raise TargetError(
            field,
            "may contain only visible ASCII characters: no spaces, no control characters "
            "(CR, LF, tab, NUL); percent-encode anything else",
        )
    if "\\" in url:
        raise TargetError(field, "must not contain a backslash")
    try:
        parts = urlsplit(url)
        port = parts.port  # raises for a port out of range or not a number
    except ValueError:
        raise TargetError(field, "must be an absolute http(s) URL") from None
    if parts.scheme.lower() not in SCHEMES or not parts.hostname:
        raise TargetError(field, "must be an absolute http(s) URL")
    if "@" in parts.netloc:
        raise TargetError(
            field, "must not carry credentials (user:password@); send them in a header"
        )
    if parts.fragment or url.endswith("#"):
        raise TargetError(field, "must not have a fragment (#…): it is never sent")
    host = parts.hostname  # lower-cased by urlsplit
    valid_host = (
        _IPV6.fullmatch(host) is not None
        if parts.netloc.lstrip().startswith("[")
        else _HOST_NAME.fullmatch(host) is not None
    )
    if not valid_host:
        raise TargetError(field, f"has an invalid host name {host!r}")
    if port == 0:
        raise TargetError(field, "must not use port 0")
    return parts


def _check_path(path: str, field: str) -> None:
    for segment in path.split("/"):
        decoded = segment
        # Each round that changes the text removes at least two characters, so this ends;
        # a URL is at most 2,048 characters.
        while True:
            if _ENCODED_SEPARATOR.search(decoded) or "\\" in decoded:
                raise TargetError(
                    field, "must not contain an encoded '/' or '\\' in its path (%2F, %5C)"
                )
            # `..;x` is `..` to servers that strip path parameters (Tomcat, Jetty, Spring).
            if decoded.split(";", 1)[0] in (".", ".."):
                raise TargetError(
                    field, "must not contain '.' or '..' path segments, literal or encoded"
                )
            again = unquote(decoded)
            if again == decoded:
                break
            decoded = again


def normalise_url(url: str, field: str = "target.url") -> str:
    """The URL as servers read it (scheme and host lower case, no default port, path at least
    `/`); TargetError for anything listed in the module docstring."""
    parts = _split(url, field)
    scheme = parts.scheme.lower()
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = parts.port
    netloc = host if port is None or port == SCHEMES[scheme] else f"{host}:{port}"
    path = parts.path or "/"
    _check_path(path, field)
    query = f"?{parts.query}" if parts.query else ""
    return f"{scheme}://{netloc}{path}{query}"


def _allows(entry: SplitResult, url: SplitResult) -> bool:
    if (entry.scheme, entry.netloc) != (url.scheme, url.netloc):
        return False
    base = entry.path.rstrip("/")
    return url.path == base or url.path.startswith(base + "/")


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@functools.lru_cache(maxsize=256)
def parse_entry(entry: str) -> tuple[str, tuple[Network, ...]]:
    """(URL prefix, the address ranges it names) of an allowlist entry `URL [RANGE …]`;
    TargetError (field `allowlist`) for a bad URL or range."""
    words = entry.split()
    if not words:
        raise TargetError("allowlist", "has an empty entry")
    url, *ranges = words
    normalise_url(url, "allowlist")
    networks = []
    for text in ranges:
        try:
            networks.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            raise TargetError(
                "allowlist", f"entry {url!r} names {text!r}, which is not an address range"
            ) from None
    return url, tuple(networks)


def entry_networks(entry: str) -> tuple[Network, ...]:
    """The address ranges an allowlist entry names (none for a bad entry)."""
    try:
        return parse_entry(entry)[1]
    except TargetError:
        return ()


@functools.lru_cache(maxsize=256)
def _entry(entry: str) -> SplitResult | None:
    """An allowlist entry's URL, normalised once (the operator's list rarely changes)."""
    try:
        return urlsplit(normalise_url(parse_entry(entry)[0], "allowlist"))
    except TargetError:
        return None


def matching_entry(url: str, allowlist: Sequence[str], field: str = "target.url") -> str | None:
    """The allowlist entry `url` lies below, or None; TargetError when `url` itself is bad.

    Entries are normalised the same way; an entry that is not a valid URL allows nothing.
    Workers call this at call time, on every redirect, to know which entry governs a hop.
    """
    parsed = urlsplit(normalise_url(url, field))
    for entry in allowlist:
        allowed = _entry(entry)
        if allowed is not None and _allows(allowed, parsed):
            return entry
    return None


def check_target_url(url: str, allowlist: Sequence[str], field: str = "target.url") -> str:
    """The normalised `url`, if it lies below an allowlist entry; TargetError otherwise."""
    if matching_entry(url, allowlist, field) is None:
        raise TargetError(
            field, "is not in the operator's target allowlist (TICKWHEEL_TARGET_ALLOWLIST)"
        )
    return normalise_url(url, field)


def check_headers(headers: Mapping[str, str], field: str = "target.headers") -> None:
    """TargetError for the first header that may not be sent, or for too many or too large."""
    if len(headers) > HEADERS_MAX:
        raise TargetError(field, f"has {len(headers)} headers; at most {HEADERS_MAX} are allowed")
    seen: set[str] = set()
    total = 0
    for name, value in headers.items():
        where = f"{field}.{name}"
        if not _TOKEN.fullmatch(name):
            raise TargetError(
                where, "is not a valid header name (letters, digits and !#$%&'*+-.^_`|~ only)"
            )
        lower = name.lower()
        if lower in FORBIDDEN_HEADERS:
            raise TargetError(
                where, "may not be set: hop-by-hop, Host, or set by tickwheel on every call"
            )
        if lower in seen:
            raise TargetError(where, "is given twice (header names ignore case)")
        seen.add(lower)
        if not _HEADER_VALUE.fullmatch(value):
            raise TargetError(
                where, "must be visible ASCII text, spaces and tabs (no CR, LF or other controls)"
            )
        total += len(name) + len(value)
    if total > HEADERS_MAX_BYTES:
        raise TargetError(
            field, f"are {total} bytes of names and values; at most {HEADERS_MAX_BYTES} allowed"
        )
