"""The harnesses' one supervisor: it tells a child that died on its own from one it stopped or
killed, and says so by name. Its children are real `tickwheel` processes that need no service
(`cron next` returns at once; `status --watch` runs until it is stopped)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tickwheel.bench.supervisor import Ending, Supervisor, SupervisorError, free_ports

pytestmark = pytest.mark.unit

CLOSED = "127.0.0.1:1"
ENV = {
    "TICKWHEEL_DSN": f"postgresql://nobody@{CLOSED}/nothing",
    "TICKWHEEL_KAFKA": CLOSED,
    "TICKWHEEL_ZK": CLOSED,
}
FOREVER = ["status", "--watch", "--interval", "3600"]


def test_a_death_is_named_and_what_the_supervisor_did_is_not(tmp_path: Path) -> None:
    """a child that exits on its own makes check() name it and is handed out once by exited();
    one killed or stopped by the supervisor is not a failure; `ended` records which was which"""
    with Supervisor(ENV, tmp_path) as procs:
        quick = procs.start("quick", ["cron", "next", "0 9 * * *", "--count", "1"])
        victim = procs.start("victim", FOREVER)
        calm = procs.start("calm", FOREVER)
        quick.popen.wait(60)
        with pytest.raises(SupervisorError, match="quick exited with code 0"):
            procs.check()
        assert [c.name for c in procs.exited()] == ["quick"] and procs.exited() == []
        assert "T09:00:00Z" in quick.tail()
        procs.kill("victim")
        procs.check()
        assert procs.stop(["calm"]) == {"calm": calm.popen.returncode}
        assert procs.ended == {
            quick.pid: Ending.DIED,
            victim.pid: Ending.KILLED,
            calm.pid: Ending.STOPPED,
        }


def test_children_run_in_sessions_of_their_own_and_are_stopped_on_exit(tmp_path: Path) -> None:
    """a child leads a session of its own (a Ctrl-C of the harness does not reach it); leaving
    the supervisor stops every child still running, whatever happened inside"""
    with pytest.raises(RuntimeError, match="inside"), Supervisor(ENV, tmp_path) as procs:
        child = procs.start("calm", FOREVER)
        time.sleep(0.2)
        assert os.getsid(child.pid) == child.pid
        raise RuntimeError("inside")
    assert child.popen.poll() is not None
    assert procs.children == {}


def test_free_ports_are_distinct() -> None:
    """ports asked for together are different ones"""
    ports = free_ports(4)
    assert len(set(ports)) == 4 and all(0 < p < 65536 for p in ports)
