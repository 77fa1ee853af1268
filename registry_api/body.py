"""Request bodies: JSON as docs/API.md promises it, read only after the caller is authenticated.

`decode_json_body(raw)` is the rule, a pure function:

- UTF-8 only. A byte order mark, or NUL bytes (which JSON text never holds, and UTF-16 or
  UTF-32 text of ASCII characters always does), or bytes that are not UTF-8: refused. (The
  stdlib's `json.loads(bytes)` would silently accept UTF-16 and UTF-32.)
- Names in an object are unique (RFC 8259 leaves duplicates to the parser; the last one would
  win silently, so a reviewer and the registry could read two different documents).
- No `NaN` or `Infinity` (not JSON).
- Integers stay exact (the stdlib parser), so that validation can refuse those beyond 64 bits.
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


class BodyError(ValueError):
    """A body that is not JSON as the API takes it; the message is one sentence."""


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
    try:
        return json.loads(text, object_pairs_hook=_unique_names, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise BodyError(
            f"the request body is not valid JSON: {exc.msg} at character {exc.pos}"
        ) from None
    except RecursionError:
        raise BodyError("the request body nests too deeply to be read") from None


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
                    raise JobValidationError([FieldProblem("", str(exc))]) from None

                async def replay() -> Message:
                    return {"type": "http.request", "body": raw, "more_body": False}

                decoded = _DecodedRequest(request.scope, replay)
                decoded.decoded = value
                return await handler(decoded)

            return checked

    return Route
