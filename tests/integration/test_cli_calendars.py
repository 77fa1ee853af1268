"""`tickwheel calendars ls|show|put|rm` against a real Postgres: what the commands print and
change, through the registry's own calendar store (D-286)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import orjson
import pytest
from click.testing import CliRunner, Result

from tickwheel.cli import main
from tickwheel.clock import now_ms
from tickwheel.registry_api import calendars
from tickwheel.registry_api.document import Limits, parse_document, validate_job
from tickwheel.registry_api.state import Op
from tickwheel.registry_api.store import RegistryStore

pytestmark = pytest.mark.integration

SHARDS = 4
HOLIDAYS = {"timezone": "Europe/Berlin", "dates": ["2026-12-25", "2026-12-26"]}


def _cli(dsn: str, *args: str, stdin: bytes | None = None) -> Result:
    env = {"TICKWHEEL_DSN": dsn, "TICKWHEEL_SHARDS": str(SHARDS)}
    return CliRunner().invoke(main, ["calendars", *args], env=env, input=stdin)


def _json(dsn: str, *args: str, stdin: bytes | None = None) -> Any:
    result = _cli(dsn, *args, "--json", stdin=stdin)
    assert result.exit_code == 0, result.output
    return orjson.loads(result.stdout)


async def _tenant_with_job(dsn: str, tenant: str, *names: str) -> None:
    """A tenant, its calendars `names` and a job `uses` naming them."""
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=1)
    try:
        store = RegistryStore(pool, SHARDS)
        await store.create_tenant(tenant)
        for name in names:
            await calendars.put(pool, tenant, name, calendars.check_calendar(name, HOLIDAYS))
        doc = {"id": "uses", "schedule": "0 3 * * *", "handler": "a.b", "calendars": list(names)}
        spec = validate_job(tenant, parse_document(doc), Limits(shards=SHARDS), now_ms())
        [applied] = await store.apply([Op("upsert", tenant, "uses", spec=spec)])
        assert applied.problem is None, applied
    finally:
        await pool.close()


def test_an_operator_puts_lists_shows_and_removes_calendars(db_dsn: str, tmp_path: Path) -> None:
    """put from a file (created, then unchanged) and from stdin; ls and show in text and JSON;
    rm; each failure one line with exit 2: an invalid calendar naming its field, an unknown
    tenant, a calendar missing, a calendar still named (its jobs listed) until --force"""
    tenant = f"t{uuid.uuid4().hex[:10]}"
    asyncio.run(_tenant_with_job(db_dsn, tenant, "named"))
    path = tmp_path / "holidays.json"
    path.write_bytes(orjson.dumps(HOLIDAYS))

    created = _cli(db_dsn, "put", "holidays", "--tenant", tenant, "--file", str(path))
    assert created.exit_code == 0, created.output
    assert created.stdout.strip() == f"{tenant}/holidays: created (version 1)"
    again = _json(db_dsn, "put", "holidays", "--tenant", tenant, "--file", str(path))
    assert (again["result"], again["version"], again["dates"]) == (
        "unchanged", 1, HOLIDAYS["dates"]
    )  # fmt: skip
    weekends = _json(db_dsn, "put", "weekends", "--tenant", tenant, stdin=b'{"weekdays": ["sun"]}')
    assert (weekends["result"], weekends["timezone"]) == ("created", "UTC")

    listed = _json(db_dsn, "ls", "--tenant", tenant)
    assert [c["name"] for c in listed["items"]] == ["holidays", "named", "weekends"]
    table = _cli(db_dsn, "ls", "--tenant", tenant)
    assert table.exit_code == 0 and table.stdout.splitlines()[0].startswith("NAME")
    assert "Europe/Berlin" in table.stdout
    shown = _cli(db_dsn, "show", "holidays", "--tenant", tenant)
    assert shown.exit_code == 0 and '"2026-12-25"' in shown.stdout
    assert _json(db_dsn, "show", "weekends", "--tenant", tenant)["weekdays"] == ["sun"]

    bad = _cli(db_dsn, "put", "zoned", "--tenant", tenant, stdin=b'{"timezone": "Mars/Olympus"}')
    assert bad.exit_code == 2 and bad.output.startswith("tickwheel: timezone"), bad.output
    nobody = _cli(db_dsn, "put", "x", "--tenant", "nobody-" + tenant, "--file", str(path))
    assert nobody.exit_code == 2 and "no tenant" in nobody.output, nobody.output
    missing = _cli(db_dsn, "show", "ghost", "--tenant", tenant)
    assert missing.exit_code == 2 and "no calendar named 'ghost'" in missing.output
    in_use = _cli(db_dsn, "rm", "named", "--tenant", tenant)
    assert in_use.exit_code == 2, in_use.output
    assert "'uses'" in in_use.output and "--force" in in_use.output
    assert len(in_use.output.splitlines()) == 1

    assert _cli(db_dsn, "rm", "holidays", "--tenant", tenant).stdout.strip() == (
        f"{tenant}/holidays: deleted"
    )
    forced = _json(db_dsn, "rm", "named", "--tenant", tenant, "--force")
    assert forced == {"calendar": f"{tenant}/named", "result": "deleted"}
    gone = _cli(db_dsn, "rm", "holidays", "--tenant", tenant)
    assert gone.exit_code == 2 and "no calendar named 'holidays'" in gone.output
    assert [c["name"] for c in _json(db_dsn, "ls", "--tenant", tenant)["items"]] == ["weekends"]
