"""The command line's toolkit, used by every command module: exit codes, one-line failures,
settings, reaching Postgres, JSON and tables.

Errors a user can fix (bad input, missing tools, unreachable services) end with one line on
stderr, `tickwheel: <sentence>`, and a non-zero exit, never a traceback:

    EXIT_ENVIRONMENT (1)  the environment is not as needed: a service down or refusing, a tool
                          missing, a schema not migrated
    EXIT_BAD_INPUT (2)    the user's input or settings are wrong (click's usage errors are 2 too)

A command either calls `fail` where it knows what went wrong, or raises a `CommandError`
(`BadInput`, `Unavailable`) from deeper down and is wrapped in `one_line_errors` (or
registered with `command`), which also turns Postgres's own errors into one sentence.
"""

from __future__ import annotations

import asyncio
import functools
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NoReturn, ParamSpec, TypeVar

import click
import orjson

from tickwheel.config import ConfigError, Settings, load_settings, redact_dsn
from tickwheel.deployment import WrongDeployment
from tickwheel.domain import RunKeyError

P = ParamSpec("P")
T = TypeVar("T")

EXIT_ENVIRONMENT = 1  # the environment is not as needed (a service down, a tool missing)
EXIT_BAD_INPUT = 2  # the user's input or settings are wrong (as click's usage errors)
PG_CONNECT_TIMEOUT_S = 10.0  # how long Postgres may take to accept a connection, seconds
CELL_MAX_CHARS = 60  # a table cell longer than this is cut (the JSON output has it whole)


class CommandError(Exception):
    """A failure the user can act on; its message is one sentence, printed as is."""

    exit_code = EXIT_ENVIRONMENT


class BadInput(CommandError):
    """An argument, option or setting that names nothing or has the wrong form."""

    exit_code = EXIT_BAD_INPUT


class Unavailable(CommandError):
    """Kafka or Postgres cannot be reached, or lacks what the command needs."""

    exit_code = EXIT_ENVIRONMENT


def fail(message: str, code: int = EXIT_ENVIRONMENT) -> NoReturn:
    """Print `tickwheel: <message>` on stderr and exit with `code`."""
    click.echo(f"tickwheel: {message}", err=True)
    sys.exit(code)


def settings() -> Settings:
    """The settings, or exit 2 naming the bad setting."""
    try:
        return load_settings()
    except ConfigError as exc:
        fail(str(exc), EXIT_BAD_INPUT)


def reason(exc: BaseException) -> str:
    """An exception as the end of a sentence (its class name when it has no message)."""
    return str(exc) or type(exc).__name__


def cannot_connect(dsn: str, exc: BaseException) -> str:
    """The sentence for a Postgres that refused or did not answer a connection."""
    return f"cannot connect to Postgres at {redact_dsn(dsn)}: {reason(exc)}"


def dsn_refused(exc: BaseException) -> str:
    """The sentence for a DSN the Postgres client cannot use (a bad setting, exit 2)."""
    return f"TICKWHEEL_DSN cannot be used: {reason(exc)}"


def startup_failed(process: str, s: Settings, exc: BaseException, *, zk: bool = False) -> NoReturn:
    """End a long-running command that could not start: one line naming the services (the DSN
    redacted) and the error; exit 2 when the DSN itself is what is wrong, else 1."""
    import asyncpg

    if isinstance(exc, asyncpg.ClientConfigurationError):
        fail(f"{process} cannot start: {dsn_refused(exc)}", EXIT_BAD_INPUT)
    where = f"Postgres at {redact_dsn(s.effective_dsn)}, Kafka at {s.effective_kafka}"
    if zk:
        where += f", ZooKeeper at {s.effective_zk}"
    fail(f"{process} cannot start ({where}): {type(exc).__name__}: {exc}")


class OneLineCommand(click.Command):
    """A command whose usage errors print as a single `Error: …` line."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as exc:
            # Without a context, UsageError.show() prints only the message line.
            exc.ctx = None
            raise


def one_line_errors(fn: Callable[P, T]) -> Callable[P, T]:
    """Turn every failure a user can act on into one line on stderr and its exit code."""
    import asyncpg

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return fn(*args, **kwargs)
        except CommandError as exc:
            code, message = exc.exit_code, str(exc)
        except (RunKeyError, WrongDeployment) as exc:
            code, message = EXIT_BAD_INPUT, str(exc)
        except (asyncpg.UndefinedTableError, asyncpg.UndefinedColumnError) as exc:
            code = EXIT_ENVIRONMENT
            message = f"the database schema is not current ({exc}): run `tickwheel db migrate`"
        except asyncpg.PostgresError as exc:
            from tickwheel.db import domain_error

            if (known := domain_error(exc)) is not None:  # a constraint: the input is wrong
                code, message = EXIT_BAD_INPUT, str(known)
            else:
                code, message = EXIT_ENVIRONMENT, f"Postgres refused: {type(exc).__name__}: {exc}"
        except asyncpg.ClientConfigurationError as exc:
            code, message = EXIT_BAD_INPUT, dsn_refused(exc)
        except (OSError, asyncpg.InterfaceError) as exc:
            code, message = EXIT_ENVIRONMENT, f"lost Postgres: {reason(exc)}"
        # Postgres adds HINT and DETAIL lines; the user gets one line.
        fail(" ".join(message.split()), code)

    return wrapper


def command(group: click.Group, name: str) -> Callable[[Callable[P, T]], click.Command]:
    """Register a subcommand of `group` whose usage errors and failures are one line."""

    def register(fn: Callable[P, T]) -> click.Command:
        return group.command(name, cls=OneLineCommand)(one_line_errors(fn))

    return register


async def reach_postgres(s: Settings, opener: Callable[[str], Awaitable[T]]) -> T:
    """`opener(dsn)` (a connection or a pool) within PG_CONNECT_TIMEOUT_S, or `Unavailable`."""
    import asyncpg

    try:
        return await asyncio.wait_for(opener(s.effective_dsn), PG_CONNECT_TIMEOUT_S)
    except TimeoutError:
        raise Unavailable(
            f"Postgres at {redact_dsn(s.effective_dsn)} did not answer within "
            f"{PG_CONNECT_TIMEOUT_S:g} s"
        ) from None
    except asyncpg.ClientConfigurationError as exc:
        raise BadInput(dsn_refused(exc)) from None
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise Unavailable(cannot_connect(s.effective_dsn, exc)) from None


def with_db(work: Callable[[Any], Awaitable[T]], s: Settings | None = None) -> T:
    """Run `work(connection)` on a fresh connection to the configured Postgres."""
    chosen = s if s is not None else settings()

    async def go() -> T:
        from tickwheel import db

        conn = await reach_postgres(chosen, db.connect)
        try:
            return await work(conn)
        finally:
            await conn.close()

    return asyncio.run(go())


def with_pool(work: Callable[[Any], Awaitable[T]], s: Settings | None = None) -> T:
    """Run `work(pool)` on a one-connection pool (what the registry's stores take)."""
    chosen = s if s is not None else settings()

    async def go() -> T:
        from tickwheel import db

        pool = await reach_postgres(chosen, lambda dsn: db.create_pool(dsn, min_size=1, max_size=1))
        try:
            return await work(pool)
        finally:
            await pool.close()

    return asyncio.run(go())


# --- output --------------------------------------------------------------------------------


def emit_json(value: Any, *, indent: bool = True) -> None:
    """One JSON document on stdout (indented, or one line for a stream of them)."""
    click.echo(orjson.dumps(value, option=orjson.OPT_INDENT_2 if indent else 0).decode())


def one_line(text: str | None) -> str:
    """A cell: one line, at most CELL_MAX_CHARS characters."""
    flat = " ".join((text or "").split())
    return flat if len(flat) <= CELL_MAX_CHARS else flat[: CELL_MAX_CHARS - 1] + "…"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain text table, columns left-aligned, separated by two spaces."""
    cells = [[one_line("" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = [list(headers), *cells]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


def listing(
    items: Sequence[dict[str, Any]],
    as_json: bool,
    *,
    empty: str,
    headers: Sequence[str],
    row: Callable[[dict[str, Any]], Sequence[Any]],
) -> None:
    """A list command's output: `{"items": […]}` with --json, else a table (or `empty`)."""
    if as_json:
        emit_json({"items": list(items)})
    elif not items:
        click.echo(empty)
    else:
        click.echo(table(headers, [row(item) for item in items]))
