"""Named SQL blocks from `tickwheel/sql/*.sql`, loaded once: `QUERIES["claim_due_jobs"]`.

A block starts at a line `-- name --` and runs to the next such line. Comments inside a block
are kept (Postgres ignores them). Python never assembles SQL text.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_HEADER = re.compile(r"^--\s*([a-z][a-z0-9_]*)\s*--\s*$", re.MULTILINE)


def parse_blocks(text: str) -> dict[str, str]:
    """Split a `.sql` file into {name: statement}; a repeated name is an error."""
    blocks: dict[str, str] = {}
    matches = list(_HEADER.finditer(text))
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        name = match.group(1)
        if name in blocks:
            raise ValueError(f"query {name!r} is defined twice")
        body = text[match.end() : end].strip()
        if not body:
            raise ValueError(f"query {name!r} is empty")
        blocks[name] = body
    return blocks


@cache
def load() -> dict[str, str]:
    queries: dict[str, str] = {}
    sql_dir = resources.files("tickwheel") / "sql"
    for entry in sorted(sql_dir.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            for name, body in parse_blocks(entry.read_text()).items():
                if name in queries:
                    raise ValueError(f"query {name!r} is defined in two files")
                queries[name] = body
    return queries


class _Queries:
    def __getitem__(self, name: str) -> str:
        try:
            return load()[name]
        except KeyError:
            raise KeyError(f"no query named {name!r} in tickwheel/sql/*.sql") from None

    def __contains__(self, name: object) -> bool:
        return name in load()


QUERIES = _Queries()
