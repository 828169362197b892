"""An HTTP/1.1 peer that closes a kept-alive connection as the next request arrives on it, unanswered.

That is what a uvicorn server (vLLM's, a judge's) does when a client picks a pooled connection just as the
server's 5 s keep-alive ends: the request goes out, the connection closes, no answer comes. Clients that pool
connections to such servers (the proxy's engine client, the judge relay) must send that request again on a
fresh connection; their tests talk to this peer.
"""

from __future__ import annotations

import asyncio


class ClosingServer:
    """Answers the first request of each connection with ``answer`` and drops the next one (closes the connection
    unanswered). ``always``: request-line prefixes answered on any connection without counting as its request
    (a models or health route). ``drop_all``: every request is dropped, as by a server that dies at each one."""

    def __init__(self, answer: bytes, content_type: str = "application/json", drop_all: bool = False,
                 always: dict[bytes, bytes] | None = None) -> None:
        self.answer, self.content_type, self.drop_all = answer, content_type.encode(), drop_all
        self.always = dict(always or {})
        self.answered = self.dropped = 0

    async def start(self) -> tuple[asyncio.Server, str]:
        """Listen on a free loopback port: the server (close it when done) and its base URL."""
        server = await asyncio.start_server(self.serve, "127.0.0.1", 0)
        return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        answered_here = False
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                fixed = next((body for prefix, body in self.always.items() if head.startswith(prefix)), None)
                if fixed is not None:
                    body, kind = fixed, b"application/json"
                elif self.drop_all or answered_here:
                    self.dropped += 1
                    return
                else:
                    answered_here, body, kind = True, self.answer, self.content_type
                    self.answered += 1
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s"
                             % (kind, len(body), body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
