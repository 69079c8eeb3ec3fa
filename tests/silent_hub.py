"""A local endpoint that accepts connections and never answers: a Hub behind a network that drops its replies."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def silent_endpoint() -> Iterator[str]:
    """The URL of a socket that accepts every connection, reads nothing and answers nothing, until the block ends."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.05)  # the accepting thread looks up this often to see whether the block has ended
    held: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        while not done.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        done.set()
        thread.join()
        for conn in [server, *held]:
            conn.close()
