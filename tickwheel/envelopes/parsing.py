"""Strict JSON in, for every decoder of the package: `loads_exact` (any JSON value, integers
of any size kept exact so that a bound can refuse them), `loads_object` (a JSON object), and
the field checks (`take` and its forms); whatever is malformed raises `EnvelopeError` naming
the field.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson


class EnvelopeError(ValueError):
    """A message that does not have the shape of its topic; names the field."""


# A run of 19+ digits may be an integer beyond 64 bits, which orjson silently turns into a
# float; the stdlib parser keeps it exact so that validation can refuse it instead. The run is
# found by mapping every ASCII digit to "0" and anything else to " " and looking for 19 zeros:
# a fifth of what the regex `\d{19,}` costs on a run envelope (~1.4 against ~6.9 µs), and a
# worker decodes one envelope per delivery.
_DIGITS_AS_ZEROS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_RUN = b"0" * 19


def has_long_digit_run(raw: bytes | str) -> bool:
    """Whether `raw` holds 19 or more ASCII digits in a row."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    return _LONG_RUN in data.translate(_DIGITS_AS_ZEROS)


def loads_exact(raw: bytes | str) -> Any:
    """Any JSON value; integers of any size kept exact. Malformed: EnvelopeError."""
    try:
        value = orjson.loads(raw)
        if has_long_digit_run(raw):
            value = json.loads(raw)
    except (orjson.JSONDecodeError, ValueError) as exc:
        raise EnvelopeError(f"value is not JSON: {exc}") from None
    except RecursionError:  # the stdlib fallback gives up before orjson's depth limit
        raise EnvelopeError("value nests too deeply to decode") from None
    return value


def loads_object(raw: bytes) -> dict[str, Any]:
    value = loads_exact(raw)
    if not isinstance(value, dict):
        raise EnvelopeError("value must be a JSON object")
    return value


def take(
    obj: dict[str, Any], name: str, kind: type | tuple[type, ...], optional: bool = False
) -> Any:
    if name not in obj or obj[name] is None:
        if optional:
            return None
        raise EnvelopeError(f"field {name!r} is missing")
    value = obj[name]
    # bool is an int in Python; a flag where a number belongs is still a wrong type.
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise EnvelopeError(f"field {name!r} has the wrong type")
    return value


def take_int(obj: dict[str, Any], name: str, low: int, high: int, optional: bool = False) -> Any:
    """An integer field within [low, high]."""
    value = take(obj, name, int, optional)
    if value is not None and not low <= value <= high:
        raise EnvelopeError(f"field {name!r} must be an integer from {low} to {high}")
    return value


def take_form(obj: dict[str, Any], name: str, form: re.Pattern[str], what: str) -> str:
    value: str = take(obj, name, str)
    if not form.fullmatch(value):
        raise EnvelopeError(f"field {name!r} must be {what}")
    return value


def take_choice(
    obj: dict[str, Any], name: str, choices: tuple[str, ...], optional: bool = False
) -> Any:
    value = take(obj, name, str, optional)
    if value is not None and value not in choices:
        raise EnvelopeError(f"field {name!r} must be one of {', '.join(choices)}")
    return value
