"""The handler API: `from tickwheel import handler, PermanentError`, registration, loading."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from tickwheel.workers import handlers
from tickwheel.workers.handlers import HandlerLoadError

pytestmark = pytest.mark.unit


def test_top_level_reexport_is_lazy() -> None:
    """`import tickwheel` does not import the workers; the names load on first use"""
    code = (
        "import sys, tickwheel; assert 'tickwheel.workers.handlers' not in sys.modules; "
        "from tickwheel import handler, PermanentError; "
        "assert handler.__module__ == 'tickwheel.workers.handlers'; "
        "assert issubclass(PermanentError, Exception)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_decorator_registers_sync_and_async_functions() -> None:
    """both kinds register under their name; is_async tells them apart"""
    from tickwheel import handler

    name = f"t.{uuid.uuid4().hex}"

    @handler(name)
    async def run(_ctx: object, _payload: object) -> None:
        return None

    @handler(name + ".sync")
    def run_sync(_ctx: object, _payload: object) -> None:
        return None

    assert handlers.resolve(name) is run and handlers.is_async(run)
    assert handlers.resolve(name + ".sync") is run_sync and not handlers.is_async(run_sync)
    assert handlers.resolve("t.never-registered") is None


def test_two_functions_under_one_name_are_refused() -> None:
    """a second function for a name is an error naming both"""
    from tickwheel import handler

    name = f"t.{uuid.uuid4().hex}"

    @handler(name)
    def first(_ctx: object, _payload: object) -> None:
        return None

    with pytest.raises(HandlerLoadError, match="defined twice"):

        @handler(name)
        def second(_ctx: object, _payload: object) -> None:
            return None


def test_unimportable_module_is_one_sentence() -> None:
    """--handlers naming a missing module fails with the module's name"""
    with pytest.raises(HandlerLoadError, match=r"cannot import 'no_such_module_x'"):
        handlers.load_modules(["no_such_module_x"])
