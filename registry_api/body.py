"""Request bodies: JSON as docs/API.md promises it, read only after the caller is authenticated.

`decode_json_body(raw)` is the rule, a pure function:

- UTF-8 only. A byte order mark, or NUL bytes (which JSON text never holds, and UTF-16 or
  UTF-32 text of ASCII characters always does), or bytes that are not UTF-8: refused. (The
  stdlib's `json.loads(bytes)` would silently accept UTF-16 and UTF-32.)
- Names in an object are unique (RFC 8259 leaves duplicates to the parser; the last one would
  win silently, so a reviewer and the registry could read two different documents).
- No `NaN` or `Infinity` (not JSON).
- Integers stay exact (the stdlib parser), so that validation can refuse those beyond 64 bits.
  One longer than INT_MAX_DIGITS (the interpreter's own limit on converting digits to an
  integer, which would otherwise escape as a ValueError and a 500) is refused here, with the
  field it stands in.
- Nesting: the parser's own recursion limit is the only bound here; the exact limit of
  `document.JSON_MAX_DEPTH` levels is checked field by field (`storable_problems`), so that
  the answer names the field.

`authenticated_first(authenticate)` is the FastAPI side: a route class whose routes with a body
run `authenticate(request)` before the body is read, and decode it with the rule above. FastAPI
by itself parses the body before any dependency runs, so a client without a key would learn
how its JSON is wrong (422) before being told it is not allowed in (401).
"""

from __future__ import annotations

import codecs
import email.message
import json
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.types import Message

from tickwheel.registry_api.document import FieldProblem, JobValidationError

_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32"),  # before UTF-16 LE, which is its prefix
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
    (codecs.BOM_UTF8, "UTF-8 with a byte order mark"),
)


# Python refuses to convert more digits than this to an int (CPython's default
# `sys.get_int_max_str_digits()`, a guard against quadratic-time conversions); such a number is
# no integer any field takes, so it is named and refused, never converted.
INT_MAX_DIGITS = 4300


class BodyError(ValueError):
    """A body that is not JSON as the API takes it; the message is one sentence. `field`
    names the value at fault (a dotted path) when it is one value, else it is empty."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field


def _unique_names(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                raise BodyError(
                    f"the request body names {name!r} twice in one object; names must be unique"
                )
            seen.add(name)
    return obj


def _no_constant(name: str) -> Any:
    raise BodyError(f"the request body is not valid JSON: {name} is not a JSON number")


class _EndlessInteger:
    """Stands in, while parsing, for an integer of more than INT_MAX_DIGITS digits."""

    def __init__(self, digits: int) -> None:
        self.digits = digits


def _endless_integer_at(value: Any) -> tuple[str, int] | None:
    """(dotted path, digits) of the first stand-in in `value`, or None."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, where = stack.pop()
        if isinstance(item, _EndlessInteger):
            return where, item.digits
        if isinstance(item, dict):
            children: Any = item.items()
        elif isinstance(item, list):
            children = enumerate(item)
        else:
            continue
        stack.extend((child, f"{where}.{key}" if where else str(key)) for key, child in children)
    return None


def decode_json_body(raw: bytes) -> Any:
    """The JSON value of a request body; BodyError for anything the module docstring refuses."""
    for bom, encoding in _BOMS:
        if raw.startswith(bom):
            raise BodyError(f"the request body is {encoding}; send UTF-8 without a byte order mark")
    if b"\x00" in raw:
        raise BodyError(
            "the request body contains NUL bytes (UTF-16 or UTF-32 text?); send UTF-8 JSON"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyError(
            f"the request body is not UTF-8 (invalid byte at position {exc.start}); send UTF-8"
        ) from None
    endless = False

    def parse_int(digits: str) -> Any:
        nonlocal endless
        if len(digits) - digits.startswith("-") <= INT_MAX_DIGITS:
            return int(digits)
        endless = True
        return _EndlessInteger(len(digits) - digits.startswith("-"))

    try:
        value = json.loads(
            text,
            object_pairs_hook=_unique_names,
            parse_constant=_no_constant,
            parse_int=parse_int,
        )
    except json.JSONDecodeError as exc:
        raise BodyError(
            f"the request body is not valid JSON: {exc.msg} at character {exc.pos}"
        ) from None
    except RecursionError:
        raise BodyError("the request body nests too deeply to be read") from None
    if endless and (found := _endless_integer_at(value)) is not None:
        where, digits = found
        subject = "is" if where else "the request body is"
        raise BodyError(
            f"{subject} an integer of {digits:,} digits; no field takes an integer beyond 64 bits",
            where,
        )
    return value


def _json_content(content_type: str | None) -> bool:
    """Whether FastAPI would read a body of this Content-Type as JSON (none counts as JSON)."""
    if not content_type:
        return True
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json")
    )


class _DecodedRequest(Request):
    """A request whose JSON body was decoded by `decode_json_body` already."""

    decoded: Any

    async def json(self) -> Any:
        return self.decoded


def authenticated_first(
    authenticate: Callable[[Request], Awaitable[object]],
) -> type[APIRoute]:
    """A route class: routes that take a body authenticate first, then decode it strictly.

    `authenticate` raises (e.g. a 401) for a request that may not proceed.
    """

    class Route(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()
            if self.body_field is None:
                return handler

            async def checked(request: Request) -> Response:
                await authenticate(request)
                raw = await request.body()
                if not raw or not _json_content(request.headers.get("content-type")):
                    return await handler(request)  # FastAPI explains what is missing
                try:
                    value = decode_json_body(raw)
                except BodyError as exc:
                    raise JobValidationError([FieldProblem(exc.field, str(exc))]) from None

                async def replay() -> Message:
                    return {"type": "http.request", "body": raw, "more_body": False}

                decoded = _DecodedRequest(request.scope, replay)
                decoded.decoded = value
                return await handler(decoded)

            return checked

    return Route
