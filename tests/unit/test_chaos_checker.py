"""The chaos checker on crafted ledgers: each verdict counted exactly as defined."""

from __future__ import annotations

import pytest

from tickwheel.bench.chaos.checker import (
    VERDICTS,
    Envelope,
    Execution,
    FaultEvent,
    Ledger,
    OffsetAudit,
    RunRow,
    Takeover,
    check_round,
    failover_gap_s,
    percentiles,
    summarize,
)

pytestmark = pytest.mark.unit

T = 1_000_000


def _row(job: str, ms: int, status: str = "succeeded", attempt: int = 1, **kw: object) -> RunRow:
    values: dict[str, object] = {"shard_id": 0, "published_ms": ms + 5, "started_ms": ms + 10}
    values.update(kw)
    return RunRow("t", job, ms, status=status, attempt=attempt, **values)  # type: ignore[arg-type]


def _start(key: str, attempt: int = 1, worker: str = "w1", pid: int = 0) -> Execution:
    return Execution(key, attempt, worker, "began", pid=pid)


def test_clean_round_has_no_findings() -> None:
    """every expected occurrence succeeded once, on time: all verdicts zero"""
    rows = [_row("a", T), _row("a", T + 1000)]
    ledger = Ledger(frozenset(r.key for r in rows), rows, [_start(r.key) for r in rows])
    result = check_round(ledger)
    assert (result.lost, result.duplicate_successes, result.early) == (0, 0, 0)
    assert result.duplicate_execution_rate == 0.0
    assert result.lateness_ms["max"] == 10


def test_missing_row_and_non_terminal_row_are_lost() -> None:
    """an expected occurrence without a row, or stuck in published/running, is lost"""
    rows = [_row("a", T, status="published"), _row("b", T, status="skipped")]
    expected = frozenset({rows[0].key, rows[1].key, "t/c@1000000"})
    result = check_round(Ledger(expected, rows, []))
    assert result.lost == 2
    assert result.lost_sample == ["t/a@1000000", "t/c@1000000"]


def test_retry_after_a_crash_is_a_duplicate_execution_not_a_duplicate_success() -> None:
    """attempt 1 died with its worker, attempt 2 succeeded: rate 1/1, no duplicate success"""
    row = _row("a", T, attempt=2)
    ledger = Ledger(frozenset({row.key}), [row], [_start(row.key, 1), _start(row.key, 2)])
    result = check_round(ledger)
    assert result.duplicate_successes == 0
    assert result.duplicate_execution_rate == 1.0


def _done(key: str, attempt: int = 1, worker: str = "w1") -> Execution:
    return Execution(key, attempt, worker, "ok")


def test_a_run_interrupted_and_run_again_completed_once_a_repeated_one_twice() -> None:
    """a handler killed mid-run then run again returned once (completion rate 0); one that
    returned, lost its result and ran again returned twice (completion rate 1/2)"""
    a, b = _row("a", T, attempt=2), _row("b", T, attempt=2)
    executions = [
        _start(a.key, 1),
        _start(a.key, 2),
        _done(a.key, 2),
        _start(b.key, 1),
        _done(b.key, 1),
        _start(b.key, 2),
        _done(b.key, 2),
    ]
    result = check_round(Ledger(frozenset({a.key, b.key}), [a, b], executions))
    assert (result.duplicate_executions, result.duplicate_completions) == (2, 1)
    assert result.duplicate_execution_rate == 1.0
    assert result.duplicate_completion_rate == 0.5
    report = summarize([{"round": 1, "fault": "worker_kill", "result": result.as_dict()}])
    assert report["duplicate_completion_rate"] == 0.5


def test_execution_after_the_recorded_success_is_a_duplicate_success() -> None:
    """a run executed again at an attempt later than the one that succeeded"""
    row = _row("a", T, attempt=1)
    ledger = Ledger(frozenset({row.key}), [row], [_start(row.key, 1), _start(row.key, 2)])
    assert check_round(ledger).duplicate_successes == 1


def test_the_succeeding_attempt_run_twice_is_explained_only_by_a_worker_that_ended() -> None:
    """the same attempt executed by two workers is no duplicate success (one result was
    recorded, I4) but a re-execution: explained when the first worker's process died with the
    run in hand, unexplained while it lived on (a suspect delivery's claim or a revoked
    partition's release failed)"""
    row = _row("a", T, worker="w2")
    executions = [_start(row.key, 1, "w1", pid=1), _start(row.key, 1, "w2", pid=2)]
    lived = check_round(Ledger(frozenset({row.key}), [row], executions))
    assert lived.duplicate_successes == 0
    assert lived.reexecutions["unexplained"] == 1
    died = check_round(Ledger(frozenset({row.key}), [row], executions, ended={1: "worker_died"}))
    assert died.duplicate_successes == 0
    assert (died.reexecutions["worker_died"], died.reexecutions["unexplained"]) == (1, 0)


def test_early_publication_or_start_is_counted() -> None:
    """published or started before the scheduled instant by the database clock"""
    rows = [
        _row("a", T, published_ms=T - 1),
        _row("b", T, started_ms=T - 1),
        _row("c", T, published_ms=T, started_ms=T),
    ]
    assert check_round(Ledger(frozenset(), rows, [])).early == 2


def test_failover_gap_spans_the_fault_on_affected_shards_only() -> None:
    """last dispatch before → first after, the longest over the shards named"""
    rows = [
        _row("a", T, shard_id=1, published_ms=T),
        _row("a", T + 1000, shard_id=1, published_ms=T + 4500),
        _row("b", T, shard_id=2, published_ms=T),
        _row("b", T + 1000, shard_id=2, published_ms=T + 9000),
    ]
    fault = FaultEvent("leader_kill", T + 100, frozenset({1}))
    assert failover_gap_s(fault, rows) == 4.5
    assert failover_gap_s(FaultEvent("pg_restart", T + 100), rows) == 9.0
    assert failover_gap_s(FaultEvent("x", T + 100_000), rows) is None


def test_percentiles_by_nearest_rank() -> None:
    """p50 of 1..100 is 50, p99 is 99, max is 100; empty gives zeros"""
    assert percentiles(range(1, 101)) == {"p50": 50, "p95": 95, "p99": 99, "max": 100}
    assert percentiles([]) == {"p50": 0, "p95": 0, "p99": 0, "max": 0}


def test_summary_totals_rounds() -> None:
    """the report's keys add the rounds up; the rate is over all executed occurrences"""
    one = check_round(Ledger(frozenset({"t/x@1"}), [], [_start("t/a@1"), _start("t/a@1", 2)]))
    rounds = [
        {"round": 1, "fault": "leader_kill", "phase": "burst", "result": one.as_dict()},
        {"round": 2, "fault": "leader_kill", "phase": "steady", "result": one.as_dict()},
    ]
    report = summarize(rounds)
    assert report["rounds"] == 2
    assert report["faults"] == {"leader_kill": 2}
    assert report["lost"] == 2
    assert report["duplicate_execution_rate"] == 1.0
    assert report["failover_gap_max_s"] is None
    assert report["reexecutions"]["unexplained"] == 2
    assert report["unexplained_reexecutions"] == 2


def test_reexecutions_are_reported_per_fault_kind_with_their_causes() -> None:
    """each fault kind's re-executions over its executed occurrences, by cause: two rounds of
    one kind add up, another kind stands apart, a kind with none reports a zero rate"""
    twice = check_round(Ledger(frozenset({"t/a@1"}), [], [_start("t/a@1"), _start("t/a@1", 2)]))
    once = check_round(Ledger(frozenset({"t/b@1"}), [], [_start("t/b@1")]))
    rounds = [
        {"round": 1, "fault": "worker_kill", "phase": "burst", "result": twice.as_dict()},
        {"round": 2, "fault": "worker_kill", "phase": "steady", "result": once.as_dict()},
        {"round": 3, "fault": "leader_kill", "phase": "burst", "result": once.as_dict()},
    ]
    by_fault = summarize(rounds)["reexecutions_by_fault"]
    assert list(by_fault) == ["leader_kill", "worker_kill"]
    worker = by_fault["worker_kill"]
    assert (worker["executed"], worker["reexecutions"], worker["rate"]) == (2, 1, 0.5)
    assert sum(worker["causes"].values()) == 1 and worker["causes"]["unexplained"] == 1
    leader = by_fault["leader_kill"]
    assert (leader["executed"], leader["reexecutions"], leader["rate"]) == (1, 0, 0.0)


def test_a_reexecution_is_explained_by_its_earlier_attempts_worker_ending() -> None:
    """attempt 1 ran in a process later killed (or stopped): attempt 2 running again is
    explained by it; the same re-execution while that process lived on is unexplained"""
    rows = [_row("a", T, attempt=2), _row("b", T, attempt=2), _row("c", T, attempt=2)]
    executions = [
        _start(rows[0].key, 1, pid=100),
        _start(rows[0].key, 2, pid=200),
        _start(rows[1].key, 1, pid=101),
        _start(rows[1].key, 2, pid=200),
        _start(rows[2].key, 1, pid=200),
        _start(rows[2].key, 2, pid=300),
    ]
    ended = {100: "worker_died", 101: "worker_stopped"}
    ledger = Ledger(frozenset(r.key for r in rows), rows, executions, ended=ended)
    assert check_round(ledger).reexecutions == {
        "worker_died": 1,
        "worker_stopped": 1,
        "database_restart": 0,
        "unexplained": 1,
    }


def test_a_reexecution_is_explained_by_a_database_restart() -> None:
    """with Postgres restarted in the round a run may run again while its worker lived on: a
    later attempt (its lease lapsed while no result could be written) or the same one (the
    release of a revoked partition could not mark it); without the restart both are
    unexplained"""
    a, b = _row("a", T, attempt=2), _row("b", T)
    executions = [
        _start(a.key, 1, pid=1),
        _start(a.key, 2, pid=1),
        _start(b.key, 1, pid=1),
        _start(b.key, 1, pid=2),
    ]
    faults = [FaultEvent("postgres_restart", T)]
    ledger = Ledger(frozenset({a.key, b.key}), [a, b], executions, faults)
    causes = check_round(ledger).reexecutions
    assert (causes["database_restart"], causes["unexplained"]) == (2, 0)
    causes = check_round(Ledger(frozenset({a.key, b.key}), [a, b], executions)).reexecutions
    assert causes["unexplained"] == 2


def test_envelope_produced_before_its_instant_is_early() -> None:
    """an envelope on a run topic whose Kafka timestamp precedes the scheduled instant"""
    envelopes = [Envelope("t/a@1000", 1000, 1, 999), Envelope("t/b@1000", 1000, 1, 1000)]
    result = check_round(Ledger(frozenset(), [], [], envelopes=envelopes))
    assert (result.early, result.early_envelopes, result.envelopes) == (1, 1, 2)


def test_failover_gap_counts_envelopes_of_rows_without_published_at() -> None:
    """a dispatch seen only on the run topic (the row was claimed before it was marked
    published) still ends the gap"""
    rows = [
        _row("a", T, shard_id=1, published_ms=T),
        _row("a", T + 1000, shard_id=1, published_ms=None),
    ]
    envelopes = [Envelope("t/a@1001000", T + 1000, 1, T + 1200)]
    fault = FaultEvent("kafka_restart", T + 100)
    assert failover_gap_s(fault, rows) is None
    assert failover_gap_s(fault, rows, envelopes) == 1.2


def test_failover_gap_is_the_longest_silence_after_the_fault_until_the_load_ends() -> None:
    """a broker that keeps serving a moment after the fault instant: the outage that follows
    is the gap, and a pause after the steady load ended is not counted"""
    instants = [T, T + 1000, T + 1500, T + 9500, T + 10_000, T + 30_000]
    rows = [_row("a", t, shard_id=1, published_ms=t) for t in instants]
    fault = FaultEvent("kafka_restart", T + 900, until_ms=T + 20_000)
    assert failover_gap_s(fault, rows) == 8.0


def test_rows_no_occurrence_allows_are_unexpected() -> None:
    """a run after its job's deletion, or one a DST policy excludes, is counted by run key;
    allowed rows are not, and without an allowed set nothing is judged"""
    rows = [_row("a", T), _row("a", T + 1000), _row("dst", T + 5000)]
    allowed = frozenset({rows[0].key})
    result = check_round(Ledger(frozenset(), rows, [], allowed=allowed))
    assert result.as_dict()["unexpected"] == 2
    assert result.unexpected == sorted([rows[1].key, rows[2].key])
    assert check_round(Ledger(frozenset(), rows, [])).unexpected == []


def test_a_claim_under_an_epoch_after_a_newer_one_took_over_is_stale() -> None:
    """epoch 3 took shard 1 over at T: a row of epoch 2 whose claim began after T plus the
    margin is a stale claim; one that began before, one of epoch 3 and one of another shard
    are not"""
    takeovers = [Takeover(1, 2, T - 60_000), Takeover(1, 3, T)]
    rows = [
        _row("a", T + 2000, shard_id=1, epoch=2, created_ms=T + 2000),
        _row("b", T, shard_id=1, epoch=2, created_ms=T + 50),
        _row("c", T + 2000, shard_id=1, epoch=3, created_ms=T + 2000),
        _row("d", T + 2000, shard_id=2, epoch=2, created_ms=T + 2000),
    ]
    result = check_round(Ledger(frozenset(), rows, [], takeovers=takeovers))
    assert result.stale_claims == [rows[0].key]


def test_reexecutions_of_a_dead_worker_beyond_what_it_held_are_counted() -> None:
    """worker pid 7 began runs a and b and recorded b's result before it died: a's run again
    is within what it held, b's is one too many — the database showed neither `running` (both
    started without a claim) and its log tells what it held; a pid that was not measured is
    not judged"""
    rows = [
        _row("a", T, worker="w8"),
        _row("b", T, worker="w7"),
        _row("c", T, attempt=2, worker="w8"),
    ]
    executions = [
        _start(rows[0].key, 1, "w7", pid=7),
        _start(rows[0].key, 1, "w8", pid=8),
        _start(rows[1].key, 1, "w7", pid=7),
        _start(rows[1].key, 1, "w8", pid=8),
        _start(rows[2].key, 1, "w9", pid=9),
        _start(rows[2].key, 2, "w8", pid=8),
    ]
    ended = {7: "worker_died", 9: "worker_died"}
    faults = [FaultEvent("worker_kill", T, None, "start", pid=7, held=0)]
    result = check_round(Ledger(frozenset(), rows, executions, faults, ended=ended))
    assert result.died_with == {7: (2, 1)}
    assert result.reexecuted_beyond_held == 1
    faults = [FaultEvent("worker_kill", T, None, "start", pid=7, held=2)]
    assert check_round(Ledger(frozenset(), rows, executions, faults, ended=ended)).died_with == {
        7: (2, 2)
    }


def test_a_committed_offset_past_a_run_whose_result_was_not_written_is_offsets_ahead() -> None:
    """the claimed copy of run a (its record timestamp is published_at) lay below the
    committed offset at T+100 while a finished at T+500: I5 broken. Run b finished before the
    audit; run c's copy below the offset is a duplicate, its claimed copy is above"""
    a = _row("a", T, published_ms=T + 5, finished_ms=T + 500)
    b = _row("b", T, published_ms=T + 6, finished_ms=T + 50)
    c = _row("c", T, published_ms=T + 7, finished_ms=T + 500)
    envelopes = [
        Envelope(a.key, T, 1, T + 5, "runs", 0, 10),
        Envelope(b.key, T, 1, T + 6, "runs", 0, 11),
        Envelope(c.key, T, 1, T + 3, "runs", 0, 12),
        Envelope(c.key, T, 1, T + 7, "runs", 0, 20),
    ]
    audits = [OffsetAudit(T + 100, {("runs", 0): 13})]
    result = check_round(
        Ledger(frozenset(), [a, b, c], [], envelopes=envelopes, offset_audits=audits)
    )
    assert result.offsets_ahead == [a.key]
    assert result.offset_audits == 1
    clean = [OffsetAudit(T + 600, {("runs", 0): 21})]
    assert (
        check_round(
            Ledger(frozenset(), [a, b, c], [], envelopes=envelopes, offset_audits=clean)
        ).offsets_ahead
        == []
    )


def test_the_summary_totals_every_verdict_that_must_be_zero() -> None:
    """each verdict of VERDICTS is a total of the report; lateness is kept per fault kind"""
    rows = [_row("a", T), _row("b", T, started_ms=T + 700)]
    keys = frozenset(r.key for r in rows)
    one = check_round(Ledger(keys, rows, [], allowed=frozenset({rows[0].key})))
    report = summarize([{"round": 1, "fault": "broker_kill", "result": one.as_dict()}])
    assert all(v in report for v in VERDICTS)
    assert report["unexpected"] == 1
    assert report["lateness_ms_by_fault"] == {"broker_kill": {"p50": 10, "p99": 700, "max": 700}}
