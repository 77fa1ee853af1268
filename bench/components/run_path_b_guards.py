"""The correctness checks of design B's statements (run_path_b.py), `statements_b --check`: on a
small database of their own, how each guard holds. A claim with a stale epoch or another
owner is fenced out and inserts nothing (I2); a job edited (new version) or no longer active
is not claimed (I3); in one statement of two leaders only the stale one is fenced; a repeated
claim of the same instant inserts nothing; the open check finds a claimed run open at its
attempt only, a run never claimed nowhere, and a run with its result written no more (I4); a
result is written once by its key, so a late success of an earlier attempt, or the same
results again, write nothing (I5); the claim and the open check plan key probes, no scan.

`check` prints a verdict per check and returns how many failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from tickwheel import db
from tickwheel.bench.components.run_path_b import (
    b_claim,
    b_claim_many,
    b_claim_params,
    b_open,
    b_write_outcomes,
    queries,
)
from tickwheel.bench.components.statements import (
    OWNER,
    PUBLISH_LEASE_MS,
    _lead_every_shard,
    round_database,
)
from tickwheel.bench.scratch import TENANT
from tickwheel.clock import now_ms
from tickwheel.domain import RunStatus
from tickwheel.schedule import ScheduleCache
from tickwheel.shards import store as leader_store
from tickwheel.shards.plan import ClaimBatch, JobEntry, plan_claims
from tickwheel.shards.store import FencedOut, Lease
from tickwheel.workers.store import Keys, Results, RunId

SUCCEEDED = RunStatus.SUCCEEDED.value
RETRYING = RunStatus.RETRYING.value


class Verdicts:
    def __init__(self) -> None:
        self.failed = 0

    def __call__(self, what: str, ok: bool, detail: object = "") -> None:
        if not ok:
            self.failed += 1
        print(f"{'ok    ' if ok else 'FAILED'} {what}{f': {detail}' if detail else ''}")


async def _claims_of(conn: asyncpg.Connection, entries: Sequence[JobEntry]) -> int:
    count: int = await conn.fetchval(queries()["b_claims_of"], TENANT, [e.job_id for e in entries])
    return count


async def _fenced(conn: asyncpg.Connection, lease: Lease, entries: list[JobEntry]) -> bool:
    try:
        await b_claim(
            conn, lease, PUBLISH_LEASE_MS, plan_claims(entries, entries[0].next_ms, ScheduleCache())
        )
    except FencedOut:
        return True
    return False


async def _plan(conn: asyncpg.Connection | asyncpg.Pool, name: str, params: Sequence[Any]) -> str:
    """The plan of B's statement `name` for these parameters (EXPLAIN: nothing runs)."""
    rows = await conn.fetch("EXPLAIN " + queries()[name], *params)
    return "\n".join(row[0] for row in rows)


async def check(dsn: str, jobs: int, setups: list[str]) -> int:
    """B's statements on `jobs` jobs of a database of their own: how each guard holds. Prints
    a verdict per check; returns how many failed."""
    verdict = Verdicts()
    async with round_database(
        dsn, "statements_b_check", jobs, setups, [queries()["b_analyze"]]
    ) as (_round_dsn, admin, leaders, workers):
        led = [(lease, entries) for lease, entries in await _lead_every_shard(leaders) if entries]
        if len(led) < 4 or min(len(e) for _, e in led[:4]) < 8:
            raise SystemExit("--check needs more jobs: at least 8 in each of 4 shards")
        (lease_a, a), (lease_b, b), (lease_c, c) = led[0], led[1], led[2]
        q = queries()

        def planned(entries: list[JobEntry]) -> ClaimBatch:
            return plan_claims(entries, entries[0].next_ms, ScheduleCache())

        # The plan: one primary-key probe per run, at the batch size of the rounds.
        everything = [e for _, entries in led for e in entries]
        params = b_claim_params(
            [(lease_c, planned(everything))], [(lease_c.epoch, lease_c.owner)], 0
        )
        plan = await _plan(leaders, "b_claim", params)
        verdict(
            f"the claim of {len(everything):,} runs reads jobs by its primary key, no scan",
            "Index Scan using jobs_pkey on jobs" in plan and "Seq Scan on jobs" not in plan,
            "" if "Seq Scan on jobs" not in plan else plan,
        )

        # I2: a leader whose epoch or owner the shard's row no longer holds claims nothing.
        new_a = await leader_store.take_over(leaders, lease_a.shard, OWNER)
        verdict("a claim with a stale epoch is fenced out", await _fenced(leaders, lease_a, a))
        verdict("… and inserts nothing", await _claims_of(leaders, a) == 0)
        stranger = Lease(new_a.shard, new_a.epoch, "someone-else")
        verdict("a claim with another owner is fenced out", await _fenced(leaders, stranger, a))
        verdict("… and inserts nothing", await _claims_of(leaders, a) == 0)

        # I3: a job edited (new version) or not active any more is not claimed.
        edited, paused, rest = b[:3], b[3:5], b[5:]
        await admin.execute(q["b_check_bump_version"], TENANT, [e.job_id for e in edited])
        await admin.execute(q["b_check_set_status"], TENANT, [e.job_id for e in paused], "paused")
        runs_b = await b_claim(leaders, lease_b, PUBLISH_LEASE_MS, planned(b))
        verdict(
            "a claim inserts only the jobs still at the wheel's version and active",
            {(r.tenant, r.job_id) for r in runs_b} == {e.ids for e in rest},
            f"{len(runs_b)} inserted, {len(rest)} expected",
        )
        verdict("… nothing for the edited jobs", await _claims_of(leaders, edited) == 0)
        verdict("… nothing for the paused jobs", await _claims_of(leaders, paused) == 0)

        # One statement for two leaders, one of them stale: only the stale one is fenced.
        lease_d, d = led[3]
        stale, fresh = await b_claim_many(
            leaders, PUBLISH_LEASE_MS, [(lease_a, planned(a)), (lease_d, planned(d))]
        )
        verdict(
            "in a claim of two leaders, the stale one is fenced out, the other's stands",
            isinstance(stale, FencedOut) and not isinstance(fresh, FencedOut)
            and len(fresh) == len(d) and await _claims_of(leaders, a) == 0,
            f"{stale!r}, {fresh if isinstance(fresh, FencedOut) else len(fresh)}",
        )  # fmt: skip
        created: list[RunId] = [(r.tenant, r.job_id, r.scheduled_ms) for r in runs_b]
        if not isinstance(fresh, FencedOut):
            created += [(r.tenant, r.job_id, r.scheduled_ms) for r in fresh]

        # Every other shard, A under its new lease: every run inserted.
        for lease, entries in [(new_a, a), *led[2:3], *led[4:]]:
            runs = await b_claim(leaders, lease, PUBLISH_LEASE_MS, planned(entries))
            created += [(r.tenant, r.job_id, r.scheduled_ms) for r in runs]
        expected = len(everything) - len(edited) - len(paused)
        verdict(
            "every other due run is claimed once",
            len(created) == len(set(created)) == expected,
            f"{len(created)} of {expected}",
        )

        # The run key: a repeated claim of the same instant inserts nothing.
        again = await b_claim(leaders, lease_c, PUBLISH_LEASE_MS, planned(c))
        verdict("a repeated claim of the same instant inserts nothing", again == [], len(again))
        progress = await admin.fetchrow(q["b_progress"])
        assert progress is not None
        verdict(
            "… and the claims are still one per run",
            progress["claimed"] == expected,
            dict(progress),
        )

        # The worker's open check (I4), with the workers' session settings.
        def keys_of(runs: Sequence[RunId], attempt: int) -> Keys:
            keys = Keys()
            for run in runs:
                keys.add(run, attempt)
            return keys

        plan = await _plan(
            workers, "b_open_runs", [db.id_list([TENANT]), db.id_list(["x"]), "0", "1"]
        )
        verdict(
            "the open check probes keys only, no scan",
            "Seq Scan" not in plan,
            plan if "Seq Scan" in plan else "",
        )
        opened = await b_open(workers, keys_of(created, 1))
        verdict("every claimed run is open at attempt 1", len(opened) == len(created), len(opened))
        verdict("none is open at attempt 2", await b_open(workers, keys_of(created, 2)) == [])
        unclaimed = [(TENANT, e.job_id, e.next_ms) for e in edited]
        verdict(
            "a run never claimed is not open",
            await b_open(workers, keys_of(unclaimed, 1)) == [],
        )

        # A retry chain on one run: attempt 1 fails, 2 is open, 2 succeeds, 1's late
        # success is refused by the key.
        chain, others = created[0], created[1:]
        failed = Results()
        failed.add(chain, 1, RETRYING, 10_000, "boom")
        written = await b_write_outcomes(workers, failed, [now_ms()], OWNER)
        verdict("attempt 1's failure is written", written == {chain})
        verdict("… attempt 1 is no longer open", await b_open(workers, keys_of([chain], 1)) == [])
        verdict("… attempt 2 is open", len(await b_open(workers, keys_of([chain], 2))) == 1)
        ok2 = Results()
        ok2.add(chain, 2, SUCCEEDED, None, None)
        verdict(
            "attempt 2's success is written",
            await b_write_outcomes(workers, ok2, [now_ms()], OWNER) == {chain},
        )
        late = Results()
        late.add(chain, 1, SUCCEEDED, None, None)
        verdict(
            "attempt 1's late success is refused by the key",
            await b_write_outcomes(workers, late, [now_ms()], OWNER) == set(),
        )

        # I5's one write: every result once; the same results again write nothing.
        done = Results()
        for run in others:
            done.add(run, 1, SUCCEEDED, None, None)
        started = [now_ms()] * len(others)
        first = await b_write_outcomes(workers, done, started, OWNER)
        verdict("every result is written", first == set(others), f"{len(first)} of {len(others)}")
        second = await b_write_outcomes(workers, done, started, OWNER)
        verdict(
            "the same results again write nothing (a second success by key)",
            second == set(),
            len(second),
        )
        verdict(
            "no run is open once its result is written",
            await b_open(workers, keys_of(created, 1)) == [],
        )
        progress = await admin.fetchrow(q["b_progress"])
        assert progress is not None
        verdict(
            "one claim and one success per run",
            progress["claimed"] == progress["completed"] == expected,
            dict(progress),
        )
    return verdict.failed
