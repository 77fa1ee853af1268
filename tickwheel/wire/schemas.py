"""`python -m tickwheel.wire.schemas [--check] [DIR]`: the JSON Schema (2020-12) files of the wire.

Writes, under DIR (default `docs/schemas` of this checkout), one file per Kafka message of
`messages.MESSAGES` and one each for the job and calendar documents, each generated from the
models the code uses. `--check` writes nothing and exits 1 naming every file that differs from
what the models give now (tests/unit/test_wire_schemas.py runs the same comparison).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from tickwheel.wire.calendar import CalendarDocument
from tickwheel.wire.job import JobDocument
from tickwheel.wire.messages import MESSAGES

DIALECT = "https://json-schema.org/draft/2020-12/schema"
DEFAULT_DIR = Path(__file__).resolve().parents[2] / "docs" / "schemas"


def schema_of(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON Schema, by its wire names (aliases), with the dialect named."""
    return {"$schema": DIALECT, **model.model_json_schema(by_alias=True)}


def schemas() -> dict[str, dict[str, Any]]:
    """File name → schema, every file of docs/schemas/."""
    found = {f"{name}.schema.json": schema_of(model) for name, model in MESSAGES.items()}
    found["job-document.schema.json"] = schema_of(JobDocument)
    found["calendar-document.schema.json"] = schema_of(CalendarDocument)
    return found


def validator(name: str, directory: Path = DEFAULT_DIR) -> Callable[[Any], list[str]]:
    """A checker of values against `<directory>/<name>.schema.json`: it returns each problem
    found, with the path of the value at fault ([] when valid). Needs the `jsonschema` package
    (a development dependency, like this module's other users: the tests)."""
    from jsonschema import Draft202012Validator

    checker = Draft202012Validator(json.loads((directory / f"{name}.schema.json").read_text()))

    def problems(value: Any) -> list[str]:
        return [
            f"{'/'.join(str(p) for p in error.absolute_path) or '(value)'}: {error.message}"
            for error in checker.iter_errors(value)
        ]

    return problems


def render(schema: dict[str, Any]) -> str:
    """A schema as committed: sorted keys, two-space indent, non-ASCII kept, one final newline."""
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def drifted(directory: Path) -> list[str]:
    """Files under `directory` that are missing or differ from the models (stray ones too)."""
    wanted = {name: render(schema) for name, schema in schemas().items()}
    present = {p.name for p in directory.glob("*.schema.json")} if directory.is_dir() else set()
    out = [name for name in sorted(present - set(wanted))]
    for name, text in sorted(wanted.items()):
        path = directory / name
        if not path.is_file() or path.read_text() != text:
            out.append(name)
    return sorted(out)


def write(directory: Path) -> list[str]:
    """Write every schema file under `directory`; the names written."""
    directory.mkdir(parents=True, exist_ok=True)
    names = []
    for name, schema in sorted(schemas().items()):
        (directory / name).write_text(render(schema))
        names.append(name)
    return names


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    rest = [a for a in args if a != "--check"]
    if len(rest) > 1 or any(a.startswith("-") for a in rest):
        print("usage: python -m tickwheel.wire.schemas [--check] [DIR]", file=sys.stderr)
        return 2
    directory = Path(rest[0]) if rest else DEFAULT_DIR
    if check:
        stale = drifted(directory)
        for name in stale:
            print(f"{directory / name}: differs from the models; regenerate it", file=sys.stderr)
        return 1 if stale else 0
    for name in write(directory):
        print(directory / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
