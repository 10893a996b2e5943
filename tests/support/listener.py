"""A TCP listener on the host's loopback that records every connection: what a sandboxed commit or a refused
query must never reach (the integrity tests and scripts/probe_hardening.py)."""

from __future__ import annotations

import socket
import threading


class Listener:
    """A TCP listener on the host's loopback that records every connection it gets."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.hits: list[bytes] = []
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    self.hits.append(conn.recv(64))
                except OSError:
                    self.hits.append(b"")

    def close(self) -> None:
        self.stop.set()
        self.sock.close()
