"""The commit-cutting proxy's reading of the protocol, on hand-made messages: which transaction
it marks, and that it cuts only after a clean commit of that transaction."""

from __future__ import annotations

import struct

import pytest

from tickwheel.bench.chaos.proxy import CommitCutter, Frames, Session

pytestmark = pytest.mark.unit


def msg(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!I", len(body) + 4) + body


def parse(name: str, text: str) -> bytes:
    return msg(b"P", name.encode() + b"\0" + text.encode() + b"\0" + b"\0\0")


def bind(statement: str) -> bytes:
    return msg(b"B", b"\0" + statement.encode() + b"\0" + b"\0\0\0\0\0\0")


def query(text: str) -> bytes:
    return msg(b"Q", text.encode() + b"\0")


def ready(state: bytes) -> bytes:
    return msg(b"Z", state)


def complete(tag: str) -> bytes:
    return msg(b"C", tag.encode() + b"\0")


def client(session: Session, *messages: bytes) -> None:
    frames = Frames()
    frames.feed(b"".join(messages))
    for kind, message in frames.take():
        session.on_client_message(kind, message)


def server(session: Session, *messages: bytes) -> list[list[bytes] | None]:
    frames = Frames()
    frames.feed(b"".join(messages))
    return [session.on_server_message(k, m) for k, m in frames.take()]


def test_frames_split_a_stream_into_whole_messages_across_reads() -> None:
    """a message cut across two reads comes out whole, once"""
    frames = Frames()
    data = query("SELECT 1") + ready(b"I")
    frames.feed(data[:7])
    assert frames.take() == []
    frames.feed(data[7:])
    assert [k for k, _ in frames.take()] == [b"Q", b"Z"]


def test_a_marked_prepared_statement_is_cut_after_its_transaction_commits() -> None:
    """the marker is in a statement prepared earlier and bound later inside BEGIN…COMMIT:
    replies inside the transaction are released at each ReadyForQuery T, and the COMMIT's
    ReadyForQuery I is where the connection is cut (once)"""
    cutter = CommitCutter()
    s = Session(cutter, None)  # type: ignore[arg-type]
    client(s, parse("s1", "UPDATE jobs SET x = 1 -- MARK"))
    assert server(s, ready(b"I")) == [[ready(b"I")]]  # not armed yet: passes
    cutter.arm("MARK")
    client(s, query("BEGIN;"))
    assert server(s, complete("BEGIN"), ready(b"T")) == [[complete("BEGIN")], [ready(b"T")]]
    client(s, bind("s1"))
    out = server(s, complete("UPDATE 1"), ready(b"T"))
    assert out == [[], [complete("UPDATE 1"), ready(b"T")]]  # held, then released
    client(s, query("COMMIT;"))
    assert server(s, complete("COMMIT"), ready(b"I")) == [[], None]
    assert cutter.fired.is_set() and len(cutter.cuts) == 1 and cutter.marker is None


def test_a_transaction_that_failed_or_rolled_back_is_not_cut() -> None:
    """an error in the marked transaction (its COMMIT answers ROLLBACK) releases the replies
    and the cutter stays armed for the next one"""
    cutter = CommitCutter()
    s = Session(cutter, None)  # type: ignore[arg-type]
    cutter.arm("MARK")
    client(s, query("INSERT INTO t VALUES (1) -- MARK"))
    error = msg(b"E", b"SERROR\0\0")
    assert server(s, error, ready(b"I")) == [[], [error, ready(b"I")]]
    client(s, query("BEGIN; SELECT 1 -- MARK"))
    out = server(s, complete("ROLLBACK"), ready(b"I"))
    assert out[-1] is not None and not cutter.fired.is_set() and cutter.marker == "MARK"


def test_an_autocommit_statement_is_cut_at_its_own_ready_for_query() -> None:
    """a marked statement outside any transaction commits at its Sync: cut there"""
    cutter = CommitCutter()
    s = Session(cutter, None)  # type: ignore[arg-type]
    cutter.arm("MARK")
    client(s, parse("", "UPDATE job_runs SET a = 1 -- MARK"), bind(""))
    assert server(s, msg(b"1", b""), msg(b"2", b""), complete("UPDATE 3"), ready(b"I"))[-1] is None


def test_a_copy_start_reaches_the_client_at_once() -> None:
    """inside a marked transaction the server's CopyInResponse is passed on (the client
    waits for it to send its rows), the commit is still cut"""
    cutter = CommitCutter()
    s = Session(cutter, None)  # type: ignore[arg-type]
    cutter.arm("jobs_stage")
    client(s, query('COPY "jobs_stage" FROM STDIN'))
    copy_in = msg(b"G", b"\1\0\0")
    assert server(s, copy_in) == [[copy_in]]
    assert server(s, complete("COPY 5"), ready(b"T")) == [[], [complete("COPY 5"), ready(b"T")]]
    client(s, query("COMMIT;"))
    assert server(s, complete("COMMIT"), ready(b"I"))[-1] is None


def test_replies_to_a_flush_reach_the_client_at_once() -> None:
    """inside a marked transaction a statement prepared with Parse, Describe, Flush (asyncpg's
    prepare: no Sync, so no ReadyForQuery answers it) gets its replies at once — held, the
    client waited for them forever — and the commit that follows is still cut"""
    cutter = CommitCutter()
    s = Session(cutter, None)  # type: ignore[arg-type]
    cutter.arm("jobs_stage")
    client(s, query("CREATE TEMP TABLE IF NOT EXISTS jobs_stage (a int)"))
    assert server(s, complete("CREATE TABLE"), ready(b"T"))[-1] == [
        complete("CREATE TABLE"),
        ready(b"T"),
    ]
    client(s, parse("s2", "SELECT a FROM jobs_stage LIMIT 1"), msg(b"D", b"Ss2\0"), msg(b"H", b""))
    described = [msg(b"1", b""), msg(b"t", b"\0\0"), msg(b"T", b"\0\0")]
    assert server(s, *described) == [[m] for m in described]
    client(s, bind("s2"), msg(b"E", b"\0\0\0\0\0"), msg(b"S", b""))
    assert server(s, complete("SELECT 0"), ready(b"T")) == [[], [complete("SELECT 0"), ready(b"T")]]
    client(s, query("COMMIT;"))
    assert server(s, complete("COMMIT"), ready(b"I"))[-1] is None
    assert cutter.fired.is_set()
