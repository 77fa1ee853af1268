"""Every JSON example in docs/API.md validates against the schema it illustrates: the message
schemas of docs/schemas/, or the HTTP models of `tickwheel.wire.responses` and
`tickwheel.wire.calendar`."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from tickwheel.wire import calendar, responses
from tickwheel.wire.schemas import validator

pytestmark = pytest.mark.unit

API = Path(__file__).resolve().parents[2] / "docs" / "API.md"
# A JSON block, and the annotation line that may stand right before it.
BLOCK = re.compile(
    r"(?:<!-- schema: (?P<name>[^,>]+?)(?P<lines>, one after another)? -->\n)?"
    r"```(?P<lang>jsonc?)\n(?P<body>.*?)```",
    re.S,
)
COMMENT = re.compile(r"[ \t]+//[^\n]*")  # jsonc: a comment after the value, to the line's end


def _examples() -> list[tuple[int, str | None, bool, str]]:
    text = API.read_text()
    return [
        (
            text.count("\n", 0, m.start()) + 1,
            m["name"],
            bool(m["lines"]),
            COMMENT.sub("", m["body"]) if m["lang"] == "jsonc" else m["body"],
        )
        for m in BLOCK.finditer(text)
    ]


def _sequence(text: str) -> list[Any]:
    """JSON values written one after another (as a topic holds messages)."""
    decoder, values, at = json.JSONDecoder(), [], 0
    while at < len(text):
        value, at = decoder.raw_decode(text, at)
        values.append(value)
        while at < len(text) and text[at].isspace():
            at += 1
    return values


def _check(name: str) -> Any:
    if name.startswith("http:"):
        short = name.removeprefix("http:")
        model = getattr(responses, short, None) or getattr(calendar, short)
        schema = Draft202012Validator(model.model_json_schema(by_alias=True))
        return lambda value: [e.message for e in schema.iter_errors(value)]
    return validator(name)


def test_every_json_example_names_its_schema() -> None:
    """No JSON example in API.md without the annotation that says what it is an example of."""
    examples = _examples()
    assert len(examples) >= 10
    assert [line for line, name, _, _ in examples if name is None] == []


@pytest.mark.parametrize(("line", "name", "lines", "body"), _examples(), ids=lambda v: str(v)[:20])
def test_the_example_validates(line: int, name: str, lines: bool, body: str) -> None:
    """The example is valid JSON (jsonc: once its comments are gone) of its schema."""
    text = body.strip()
    values = _sequence(text) if lines else [json.loads(text)]
    check = _check(name)
    for value in values:
        assert check(value) == [], f"API.md line {line}: {value}"
