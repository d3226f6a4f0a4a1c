"""A TCP proxy in front of the database that sees every command on the wire (bench/runtime.py).

It counts request messages per client port (which process sent them: an install actor's
sockets are found in /proc) and times each one, from the moment its request passes the proxy
to the moment the first reply naming it (`responseTo`) comes back: what a run spends waiting
on the database, as the service sees it, whatever the service's own code does meanwhile.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections import Counter
from dataclasses import dataclass

from svc.subprocesses.embedded_db import free_port

OP_MSG_HEADER = struct.Struct("<iiii")  # messageLength, requestID, responseTo, opCode
MONITORING = ("hello", "ismaster", "isMaster")  # the driver's own heartbeats, not the service's


@dataclass(frozen=True)
class Waited:
    """One command's time at the database: sent, answered (perf_counter seconds)."""

    port: int
    name: str
    sent: float
    answered: float


class CountingProxy:
    """A TCP proxy in front of the database that counts and times request messages per client port."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self.requests: dict[int, Counter[str]] = {}
        self.waited: list[Waited] = []
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        client_port = writer.get_extra_info("peername")[1]
        self.requests.setdefault(client_port, Counter())
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        pending: dict[int, tuple[str, float]] = {}  # requestID: (command, sent)

        async def requests() -> None:
            while True:
                header = await reader.readexactly(OP_MSG_HEADER.size)
                length, request_id = OP_MSG_HEADER.unpack(header)[:2]
                rest = await reader.readexactly(length - OP_MSG_HEADER.size)
                name = command_name(header, rest)
                self.requests[client_port][name] += 1
                pending[request_id] = (name, time.perf_counter())
                up_writer.write(header + rest)
                await up_writer.drain()

        async def replies() -> None:
            while True:
                header = await up_reader.readexactly(OP_MSG_HEADER.size)
                length, _, response_to = OP_MSG_HEADER.unpack(header)[:3]
                rest = await up_reader.readexactly(length - OP_MSG_HEADER.size)
                asked = pending.pop(response_to, None)  # a streamed reply's later parts name none
                if asked is not None and asked[0] not in MONITORING:
                    self.waited.append(Waited(client_port, asked[0], asked[1], time.perf_counter()))
                writer.write(header + rest)
                await writer.drain()

        try:
            await asyncio.gather(requests(), replies())
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            up_writer.close()

    def snapshot(self) -> dict[int, Counter[str]]:
        return {port: Counter(counts) for port, counts in self.requests.items()}

    def waited_between(self, start: float, end: float) -> list[Waited]:
        """The commands sent and answered within [start, end]."""
        return [w for w in self.waited if w.sent >= start and w.answered <= end]


def command_name(header: bytes, rest: bytes) -> str:
    """The command of an OP_MSG request: the first key of its body section (kind 0), with the
    collection it names when its value is a string (`update run_events`)."""
    if OP_MSG_HEADER.unpack(header)[3] != 2013 or len(rest) < 10 or rest[4] != 0:
        return "other"
    # flagBits (4), kind (1), document length (4), then the first element: type byte, cstring name.
    end = rest.index(b"\0", 10)
    name = rest[10:end].decode(errors="replace")
    if rest[9] == 2 and len(rest) >= end + 5:  # a string value: int32 length, bytes, NUL
        (length,) = struct.unpack_from("<i", rest, end + 1)
        name += " " + rest[end + 5 : end + 4 + length].decode(errors="replace")
    return name


def round_trips(
    before: dict[int, Counter[str]], after: dict[int, Counter[str]], actor_ports: set[int]
) -> tuple[int, Counter[str]]:
    """(all requests, the actor sockets' requests by command) between two snapshots, monitoring
    left out."""
    total, actor = 0, Counter[str]()
    for port, counts in after.items():
        delta = counts - before.get(port, Counter())
        for name in MONITORING:
            delta.pop(name, None)
        total += sum(delta.values())
        if port in actor_ports:
            actor += delta
    return total, actor


def busy_ms(waited: list[Waited]) -> float:
    """How long at least one of these commands was at the database (their union), in ms."""
    total, reach = 0.0, float("-inf")
    for w in sorted(waited, key=lambda w: w.sent):
        if w.answered > reach:
            total += w.answered - max(w.sent, reach)
            reach = w.answered
    return total * 1000
