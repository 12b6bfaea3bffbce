"""A TCP forwarder from the real node's bridge to the API server on loopback.

Why: the plane binds the API server to 127.0.0.1 only, and a pod cannot reach the host's
loopback. Pods reach the API server the normal way, through the `kubernetes` Service (10.96.0.1:443);
its EndpointSlice names the bridge's gateway address, where this process listens and relays the
bytes (TLS end to end: the API server's certificate carries the Service IP). Binding the API
server to every address instead would put it on the host's network too.

    python -m llmop.devcluster.forward --listen 10.89.0.1:16443 --to 127.0.0.1:16443
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, on_error) -> None:
    """Copy one direction; at its end pass the half-close on (the other direction may go on).
    On an error, `on_error` tears down both sides so neither peer waits on a dead connection."""
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError, RuntimeError):
        on_error()


async def serve(listen: tuple[str, int], to: tuple[str, int]) -> None:
    """Accept on `listen` and relay each connection to `to` until cancelled."""

    async def relay(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            upstream_r, upstream_w = await asyncio.open_connection(*to)
        except OSError:
            client_w.close()
            return
        writers = (client_w, upstream_w)
        for w in writers:  # a peer that vanishes without a word (a deleted pod) is noticed
            if (sock := w.get_extra_info("socket")) is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)

        def abort() -> None:
            for w in writers:
                w.transport.abort()

        try:
            await asyncio.gather(_pipe(client_r, upstream_w, abort), _pipe(upstream_r, client_w, abort))
        finally:
            for w in (upstream_w, client_w):
                with contextlib.suppress(OSError, RuntimeError):
                    w.close()

    server = await asyncio.start_server(relay, *listen)
    async with server:
        await server.serve_forever()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--listen", type=_address, required=True, help="host:port to accept on")
    ap.add_argument("--to", type=_address, required=True, help="host:port to relay to")
    args = ap.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.listen, args.to))


if __name__ == "__main__":
    main()
