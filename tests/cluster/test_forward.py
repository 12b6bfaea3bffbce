"""The API server forwarder relays bytes both ways, connection by connection, and a connection
whose upstream is down is closed rather than left hanging."""

from __future__ import annotations

import asyncio
import socket

from llmop.devcluster.forward import serve


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _exchange(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    writer.write_eof()
    reply = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return reply


def test_relays_each_connection_to_the_upstream_and_back():
    async def main() -> None:
        async def upper(reader, writer):
            writer.write((await reader.read()).upper())
            await writer.drain()
            writer.close()

        upstream = await asyncio.start_server(upper, "127.0.0.1", 0)
        to = upstream.sockets[0].getsockname()[:2]
        listen = ("127.0.0.1", _free_port())
        relay = asyncio.create_task(serve(listen, to))
        await asyncio.sleep(0.2)
        big = b"x" * 300_000  # several reads' worth
        replies = await asyncio.gather(_exchange(listen[1], b"hello"), _exchange(listen[1], big))
        assert replies == [b"HELLO", big.upper()]
        upstream.close()
        await upstream.wait_closed()
        assert await _exchange(listen[1], b"anyone?") == b""  # upstream gone: closed, not hung
        relay.cancel()

    asyncio.run(main())
