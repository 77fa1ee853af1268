"""One peer on the hot second, and the line that sets it beside tickwheel's.

The method is `tickwheel bench hot-second`'s: a scratch database of the peer's own (dropped at
the end), its workers started and idle before the jobs exist, T0 a whole second far enough
ahead for the jobs to be added before it, the jobs added through the peer's own bulk API, then
the records followed until every job has started. The figures are read from the records the
handlers wrote: T0 → each job's first start, duplicates (a job started twice), missing jobs,
and the machine's busy CPU from T0 until the last start was seen, per run.
"""

from __future__ import annotations

import asyncio
import math
import signal
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tickwheel.bench.analysis import finite, percentile
from tickwheel.bench.peers.systems import Peer, PeerError
from tickwheel.bench.supervisor import machine_cpu_seconds
from tickwheel.testing import scratch_database_async

RECORD = struct.Struct("<Iq")  # job index, unix microseconds: what every peer's handler writes
WORKERS = 2
READY_TIMEOUT_S = 60.0
SETTLE_S = 2.0  # after the workers are up, before the jobs are added
POLL_S = 0.1
LINGER_S = 1.0  # after the last start: a duplicate start would show up here
STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Figures:
    """One system's line of the comparison. Times are seconds after T0."""

    system: str
    version: str
    jobs: int
    last_start_s: float | None
    start_p50_s: float | None
    start_p99_s: float | None
    duplicates: int
    missing: int
    cpu_us_per_run: float | None
    settings: str
    notes: list[str] = field(default_factory=list)
    published_max_s: float | None = None  # tickwheel and the floor: the last message's append
    completed_max_s: float | None = None  # tickwheel: the last result written

    def to_json(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "version": self.version,
            "jobs": self.jobs,
            "last_start_s": self.last_start_s,
            "start_p50_s": self.start_p50_s,
            "start_p99_s": self.start_p99_s,
            "duplicates": self.duplicates,
            "missing": self.missing,
            "machine_cpu_us_per_run": self.cpu_us_per_run,
            "settings": self.settings,
            "notes": self.notes,
            "published_max_s": self.published_max_s,
            "completed_max_s": self.completed_max_s,
        }


def starts_of(data: bytes, jobs: int) -> tuple[dict[int, int], int, int]:
    """From the concatenated records: each job's first start (unix µs), the duplicate starts,
    and the records naming no job of this run (a bad index)."""
    first: dict[int, int] = {}
    duplicates = strays = 0
    usable = len(data) - len(data) % RECORD.size
    for index, micros in RECORD.iter_unpack(data[:usable]):
        if index >= jobs:
            strays += 1
        elif index in first:
            duplicates += 1
            first[index] = min(first[index], micros)
        else:
            first[index] = micros
    return first, duplicates, strays


def figures_of(
    peer: Peer, version: str, jobs: int, data: bytes, t0_ms: int, cpu_s: float, notes: list[str]
) -> Figures:
    """The line of one peer's run, from its records and the machine's CPU over the burst."""
    first, duplicates, strays = starts_of(data, jobs)
    if strays:
        notes.append(f"{strays} records named no job of this run")
    lateness = sorted((micros / 1000 - t0_ms) / 1000 for micros in first.values())
    return Figures(
        system=peer.name,
        version=version,
        jobs=jobs,
        last_start_s=round(lateness[-1], 3) if lateness else None,
        start_p50_s=round(percentile(lateness, 50), 3) if lateness else None,
        start_p99_s=round(percentile(lateness, 99), 3) if lateness else None,
        duplicates=duplicates,
        missing=jobs - len(first),
        cpu_us_per_run=finite(round(cpu_s * 1e6 / jobs)) if first else None,
        settings=peer.settings,
        notes=notes,
    )


def _recorded(files: Sequence[Path]) -> int:
    return sum(f.stat().st_size // RECORD.size for f in files if f.exists())


def _stop(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _log_tail(path: Path) -> str:
    lines = path.read_text(errors="replace").strip().splitlines() if path.exists() else []
    return " | ".join(lines[-5:]) or "(no output)"


async def run_peer(
    peer: Peer,
    dsn: str,
    jobs: int,
    lead_s: float | None,
    timeout_s: float,
    log_dir: Path | None,
    say: Callable[[str], None],
) -> Figures:
    """Build `peer` if needed, then measure it on `jobs` due at T0 on the server of `dsn`."""
    say(f"{peer.name}: building (once per version of its sources) ...")
    home = await asyncio.to_thread(peer.build)
    folder = log_dir or Path(tempfile.mkdtemp(prefix=f"tickwheel-peer-{peer.folder}-"))
    folder.mkdir(parents=True, exist_ok=True)
    async with scratch_database_async(dsn, f"peer_{peer.folder}") as db:
        await asyncio.to_thread(peer.migrate, home, db.dsn)
        records = [folder / f"starts-{k}.bin" for k in range(WORKERS)]
        readies = [folder / f"ready-{k}" for k in range(WORKERS)]
        logs = [folder / f"worker-{k}.log" for k in range(WORKERS)]
        for path in (*records, *readies):
            path.unlink(missing_ok=True)
        procs: list[subprocess.Popen[bytes]] = []
        try:
            for rec, ready, log in zip(records, readies, logs, strict=True):
                with log.open("wb") as out:
                    command = peer.worker_command(home, db.dsn, rec, ready)
                    procs.append(
                        subprocess.Popen(command, cwd=home, stdout=out, stderr=subprocess.STDOUT)
                    )
            version = await _ready(peer, procs, readies, logs)
            await asyncio.sleep(SETTLE_S)
            t0_ms = math.ceil(time.time() + (lead_s or default_lead_s(jobs))) * 1000
            say(f"{peer.name}: adding {jobs:,} jobs due {t0_ms / 1000 - time.time():.0f} s ahead")
            notes = await _add(peer, peer.add_command(home, db.dsn, jobs, t0_ms), home, t0_ms)
            cpu_s = await _follow(peer, procs, records, jobs, t0_ms, timeout_s, notes)
            await asyncio.sleep(LINGER_S)
            await asyncio.to_thread(_stop, procs)  # the workers write out what they hold
            data = b"".join(r.read_bytes() for r in records if r.exists())
            return figures_of(peer, version, jobs, data, t0_ms, cpu_s, notes)
        finally:
            await asyncio.to_thread(_stop, procs)
            say(f"{peer.name}: worker logs in {folder}")


async def _ready(
    peer: Peer,
    procs: Sequence[subprocess.Popen[bytes]],
    readies: Sequence[Path],
    logs: Sequence[Path],
) -> str:
    """The peer's version, once every worker wrote its ready file."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not all(r.exists() and r.read_text() for r in readies):
        for proc, log in zip(procs, logs, strict=True):
            if proc.poll() is not None:
                raise PeerError(
                    f"a {peer.name} worker exited ({proc.returncode}): {_log_tail(log)}"
                )
        if time.monotonic() > deadline:
            raise PeerError(f"{peer.name} workers not up after {READY_TIMEOUT_S:.0f} s")
        await asyncio.sleep(POLL_S)
    return readies[0].read_text().strip()


def default_lead_s(jobs: int) -> float:
    """Seconds from adding the jobs to T0: the peers add ~10,000 jobs/s or more."""
    return max(15.0, jobs / 5000 + 10)


async def _add(peer: Peer, command: list[str], home: Path, t0_ms: int) -> list[str]:
    """Add the jobs through the peer's bulk API; the notes on how it went."""
    added = await asyncio.to_thread(
        subprocess.run, command, cwd=home, capture_output=True, text=True, check=False
    )
    if added.returncode != 0:
        raise PeerError(f"adding {peer.name}'s jobs failed: {added.stderr.strip()[-500:]}")
    if time.time() * 1000 >= t0_ms:
        return ["adding the jobs ended after T0: give a longer --lead-s"]
    return []


async def _follow(
    peer: Peer,
    procs: Sequence[subprocess.Popen[bytes]],
    records: Sequence[Path],
    jobs: int,
    t0_ms: int,
    timeout_s: float,
    notes: list[str],
) -> float:
    """From T0 until every job has a record (or the timeout): the machine's busy CPU seconds."""
    await asyncio.sleep(max(0.0, t0_ms / 1000 - time.time()))
    cpu_before = machine_cpu_seconds()
    deadline = t0_ms / 1000 + timeout_s
    while _recorded(records) < jobs:
        for proc in procs:
            if proc.poll() is not None:
                raise PeerError(f"a {peer.name} worker exited ({proc.returncode}) during the burst")
        if time.time() > deadline:
            notes.append(f"stopped {timeout_s:.0f} s after T0 with runs missing")
            break
        await asyncio.sleep(POLL_S)
    return machine_cpu_seconds() - cpu_before


def tickwheel_figures(burst: dict[str, Any], version: str, settings: str) -> Figures:
    """tickwheel's line, from `tickwheel bench hot-second`'s figures (`report.burst_json`)."""
    jobs = burst["jobs"]
    cpu = sum(burst["cpu_seconds_t0_to_done"].values())  # its parts add up to the machine
    return Figures(
        system="tickwheel",
        version=version,
        jobs=jobs,
        last_start_s=burst["started_max_s"],
        start_p50_s=burst["started_p50_s"],
        start_p99_s=burst["started_p99_s"],
        duplicates=burst["duplicates"],
        missing=burst["lost"],
        cpu_us_per_run=round(cpu * 1e6 / jobs),
        settings=settings,
        notes=list(burst.get("notes", [])),
        published_max_s=burst["published_max_s"],
        completed_max_s=burst["completed_max_s"],
    )


def floor_figures(floor: dict[str, Any]) -> Figures:
    """The floor's line: its runs have no start apart from their completion (a no-op), so its
    completions stand in the start columns."""
    jobs = floor["jobs"]
    return Figures(
        system="floor",
        version="",
        jobs=jobs,
        last_start_s=floor["completed_max_s"],
        start_p50_s=floor["completed_p50_s"],
        start_p99_s=floor["completed_p99_s"],
        duplicates=0,
        missing=jobs - floor["completed_count"],
        cpu_us_per_run=round(floor["cpu_seconds_t0_to_done"]["whole_machine"] * 1e6 / jobs),
        settings="the design's least work: claim 5,000 per statement, 1 message per run, "
        "results 500 per statement (completions)",
        published_max_s=floor["published_max_s"],
        completed_max_s=floor["completed_max_s"],
    )


def _cell(value: float | None, form: str = ".2f") -> str:
    return "—" if value is None else format(value, form)


def comparison_table(rows: Sequence[Figures]) -> str:
    """The systems one per line, then tickwheel's last start over each other's."""
    jobs = rows[0].jobs if rows else 0
    lines = [
        f"| {jobs:,} jobs due at T0 | last start s | start p50 s | start p99 s | duplicates "
        "| missing | machine CPU µs/run |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        name = f"{row.system} {row.version}".strip()
        lines.append(
            f"| {name} | {_cell(row.last_start_s)} | {_cell(row.start_p50_s)} | "
            f"{_cell(row.start_p99_s)} | {row.duplicates} | {row.missing} | "
            f"{_cell(row.cpu_us_per_run, '.0f')} |"
        )
    ours = next((r.last_start_s for r in rows if r.system == "tickwheel"), None)
    others = [(r.system, r.last_start_s) for r in rows if r.system != "tickwheel"]
    ratios = [f"{name}'s {ours / theirs:.2f}" for name, theirs in others if ours and theirs]
    if ratios:
        lines += ["", "tickwheel's last start ÷ " + ", ".join(ratios)]
    for row in rows:
        lines.append(f"{row.system}: {row.settings}")
        if row.published_max_s is not None:
            lines.append(
                f"{row.system}: published max {_cell(row.published_max_s)} s, "
                f"completed max {_cell(row.completed_max_s)} s"
            )
        lines.extend(f"NOTE ({row.system}): {note}" for note in row.notes)
    return "\n".join(lines)
