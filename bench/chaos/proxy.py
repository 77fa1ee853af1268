"""A commit acknowledged into the void: a TCP proxy between one process and Postgres that lets a
chosen transaction commit and then cuts the connection before the reply reaches the client.

The client cannot tell whether its commit landed (Temporal's "the write succeeded while the
caller saw a timeout"): it sees a dropped connection, and whatever it does next — retry the
batch, put the claim back into the wheel, write the result again — must neither lose the work
nor do it twice. The chaos faults `dropped_reply_*` arm it for one writer each.

How it reads the protocol (PostgreSQL's frontend/backend protocol, version 3):

    client → server   the start-up packet (and an SSL or GSS request before it, which the
                      proxy refuses itself with `N`, so the session stays plain text) has no
                      type byte; then every message is a type byte, a 4-byte length and a
                      body.
                      `Parse` names a statement and carries its text, `Bind` names the
                      statement it runs, `Query` carries text: together they tell which
                      transaction ran a statement whose text holds the armed marker.
    server → client   typed messages; `ReadyForQuery` ends every command cycle with the
                      transaction state: `I` idle (the transaction ended), `T` in one, `E`
                      failed. An `ErrorResponse`, or a `CommandComplete` tagged ROLLBACK,
                      means the marked transaction did not commit.

Armed, the proxy forwards everything as usual until a statement with the marker is bound or
sent; from then on it holds the server's replies of each command cycle until its
`ReadyForQuery` (or a COPY's start, which the client must see to send its rows, or the replies to
messages the client ended with a `Flush` instead of a `Sync` — asyncpg prepares a statement
with Parse, Describe, Flush, and no `ReadyForQuery` answers that): `T` (still
inside the transaction) releases them, `I` after a clean cycle
means the commit landed — the replies are dropped, both connections are cut (the client's with
a reset) and the cut is recorded; anything else releases them and disarms nothing. Unarmed it
only frames messages. One cut per arming.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from dataclasses import dataclass, field

SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
HEADER = struct.Struct("!cI")  # type byte, length (counting itself, not the type)
READ_CHUNK = 65536
COPY_STARTS = (b"G", b"H", b"W")  # CopyIn/CopyOut/CopyBothResponse: the client answers them
log = logging.getLogger("tickwheel.chaos.proxy")


@dataclass
class Cut:
    """One cut: when (unix ms) and the marker that armed it."""

    at_ms: int
    marker: str


@dataclass
class CommitCutter:
    """The arming shared by the proxies of one process (one per Postgres node it may reach)."""

    marker: str | None = None
    cuts: list[Cut] = field(default_factory=list)
    fired: asyncio.Event = field(default_factory=asyncio.Event)

    def arm(self, marker: str) -> None:
        self.marker = marker
        self.fired.clear()

    def disarm(self) -> None:
        self.marker = None

    def take(self) -> str | None:
        """The marker, once: the connection that cuts disarms the cutter."""
        marker, self.marker = self.marker, None
        return marker


class Frames:
    """Typed protocol messages from a byte stream, in order: feed bytes, take whole messages."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self.buffer += data

    def take(self) -> list[tuple[bytes, bytes]]:
        """Complete messages as (type byte, whole message bytes)."""
        out = []
        while len(self.buffer) >= HEADER.size:
            kind, length = HEADER.unpack_from(self.buffer)
            end = 1 + length
            if len(self.buffer) < end:
                break
            out.append((kind, bytes(self.buffer[:end])))
            del self.buffer[:end]
        return out


def _cstring(body: bytes, start: int) -> tuple[str, int]:
    end = body.index(b"\0", start)
    return body[start:end].decode(errors="replace"), end + 1


class Session:
    """One client connection and its server connection."""

    def __init__(self, cutter: CommitCutter, client: asyncio.StreamWriter) -> None:
        self.cutter = cutter
        self.client = client
        self.statements: dict[str, str] = {}  # prepared statement name → text
        self.marked: str | None = None  # the marker a statement of this transaction held
        self.failed = False
        self.held: list[bytes] = []
        self.cut = False
        self.flushing = False  # the client's last message was a Flush: its replies end no cycle

    # client → server ------------------------------------------------------------------------

    def on_client_message(self, kind: bytes, message: bytes) -> None:
        body = message[5:]
        text: str | None = None
        if kind == b"H":
            self.flushing = True
        elif kind in (b"S", b"Q"):
            self.flushing = False
        if kind == b"Q":
            text, _ = _cstring(body, 0)
        elif kind == b"P":
            name, at = _cstring(body, 0)
            self.statements[name] = _cstring(body, at)[0]
        elif kind == b"B":
            _portal, at = _cstring(body, 0)
            text = self.statements.get(_cstring(body, at)[0])
        marker = self.cutter.marker
        if text is not None and self.marked is None and marker is not None and marker in text:
            self.marked = marker
            self.failed = False

    # server → client ------------------------------------------------------------------------

    def on_server_message(self, kind: bytes, message: bytes) -> list[bytes] | None:
        """What to forward now (None: cut here)."""
        if self.marked is None:
            return [message]
        self.held.append(message)
        if kind == b"E" or (kind == b"C" and message[5:].startswith(b"ROLLBACK")):
            self.failed = True
        # The client waits for these before it sends more: a COPY's start (then its rows), and
        # the replies to what it flushed (no ReadyForQuery comes for them).
        if kind in COPY_STARTS or (self.flushing and kind != b"Z"):
            held, self.held = self.held, []
            return held
        if kind != b"Z":
            return []
        state = message[5:6]
        held, self.held = self.held, []
        if state == b"I":
            marker, self.marked = self.marked, None
            if not self.failed and self.cutter.marker == marker and self.cutter.take():
                self.cutter.cuts.append(Cut(int(time.time() * 1000), marker))
                self.cutter.fired.set()
                return None
        elif state == b"E":
            self.marked = None
        return held


class CommitCutProxy:
    """Listens on a loopback port and forwards to Postgres at `upstream`, cutting as armed."""

    def __init__(self, cutter: CommitCutter, upstream: tuple[str, int]) -> None:
        self.cutter = cutter
        self.upstream = upstream
        self.server: asyncio.Server | None = None
        self.port = 0
        self._sessions: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self, port: int = 0) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", port)
        self.port = int(self.server.sockets[0].getsockname()[1])
        return self.port

    async def close(self) -> None:
        """Stop listening and end every connection (each session then ends by itself)."""
        if self.server is not None:
            self.server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        if self._sessions:
            await asyncio.wait(list(self._sessions), timeout=5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._session(reader, writer)
        except asyncio.CancelledError:
            # Cancelled as the harness's loop ends: end quietly. (Python 3.11's start_server
            # logs a connection handler that ends cancelled as "Exception in callback", once
            # per open connection.)
            writer.transport.abort()

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            return
        session = Session(self.cutter, writer)
        pumps = {
            asyncio.create_task(self._client_to_server(session, reader, up_writer)),
            asyncio.create_task(self._server_to_client(session, up_reader, writer)),
        }
        self._sessions.update(pumps)
        self._writers.update({writer, up_writer})
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            ends = await asyncio.gather(*pumps, return_exceptions=True)
            for end in ends:  # a connection's end is no error; anything else is the proxy's bug
                if isinstance(end, Exception) and not isinstance(
                    end, OSError | asyncio.IncompleteReadError | asyncio.CancelledError
                ):
                    log.error("proxy session failed", exc_info=end)
            if session.cut:
                writer.transport.abort()  # a reset: the reply never arrives
            else:
                writer.close()
            up_writer.close()
            self._sessions.difference_update(pumps)
            self._writers.difference_update({writer, up_writer})

    async def _client_to_server(
        self, session: Session, reader: asyncio.StreamReader, up: asyncio.StreamWriter
    ) -> None:
        # Untyped start-up packets first: SSL/GSS requests, refused here (the client then goes
        # on in plain text, as with a server without TLS), then the start-up message itself.
        while True:
            head = await reader.readexactly(4)
            (length,) = struct.unpack("!I", head)
            rest = await reader.readexactly(length - 4)
            if struct.unpack("!I", rest[:4])[0] in (SSL_REQUEST, GSSENC_REQUEST):
                session.client.write(b"N")
                await session.client.drain()
                continue
            up.write(head + rest)
            await up.drain()
            break
        frames = Frames()
        while data := await reader.read(READ_CHUNK):
            frames.feed(data)
            for kind, message in frames.take():
                session.on_client_message(kind, message)
                up.write(message)
            await up.drain()

    async def _server_to_client(
        self, session: Session, reader: asyncio.StreamReader, client: asyncio.StreamWriter
    ) -> None:
        frames = Frames()
        while data := await reader.read(READ_CHUNK):
            frames.feed(data)
            for kind, message in frames.take():
                out = session.on_server_message(kind, message)
                if out is None:
                    session.cut = True
                    return
                for chunk in out:
                    client.write(chunk)
            await client.drain()
