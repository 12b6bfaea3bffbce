"""The API server forwarder relays bytes both ways, connection by connection; a connection whose
upstream is down, or dies mid-stream, is closed rather than left hanging (a watch would wait forever)."""

from __future__ import annotations

import asyncio

from llmop.devcluster.forward import serve
from llmop.serve_process import free_port


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
        listen = ("127.0.0.1", free_port())
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


def test_an_upstream_that_dies_mid_stream_ends_the_client_connection():
    async def main() -> None:
        async def dies(reader, writer):
            await reader.read(5)
            writer.write(b"partial")
            await writer.drain()
            writer.transport.abort()  # a reset, as when the API server restarts

        upstream = await asyncio.start_server(dies, "127.0.0.1", 0)
        listen = ("127.0.0.1", free_port())
        relay = asyncio.create_task(serve(listen, upstream.sockets[0].getsockname()[:2]))
        await asyncio.sleep(0.2)
        reader, writer = await asyncio.open_connection(*listen)
        writer.write(b"hello")  # no EOF from the client: it keeps the connection open, like a watch
        await writer.drain()
        got = b""
        try:
            while chunk := await asyncio.wait_for(reader.read(1024), 10):
                got += chunk
        except ConnectionResetError:
            pass
        assert got in (b"", b"partial")  # then EOF or a reset, not a hang (wait_for would time out)
        writer.close()
        upstream.close()
        relay.cancel()

    asyncio.run(main())
