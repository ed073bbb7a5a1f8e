"""A TCP relay on loopback between clients and a real redis-server, that can delay the
server's replies and swallow what clients send: the network conditions under which a
reply arrives long after the server acted on the command. Not a mock: every byte still
goes to and comes from the real server."""

from __future__ import annotations

import heapq
import socket
import threading
import time

from servers import free_port


class Proxy:
    def __init__(self, target_port: int):
        self.target_port = target_port
        self.reply_delay = 0.0  # seconds added to every server -> client chunk
        self.dropping = False  # client -> server chunks are swallowed while set
        self._drop_after = None
        self.dropped_after_at = None  # monotonic time the armed chunk reached the proxy
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        for _ in range(50):
            try:
                self.port = free_port()
                self._listener.bind(("127.0.0.1", self.port))
                break
            except OSError:
                continue
        self._listener.listen(16)
        self._sockets = [self._listener]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def drop_after(self, pattern: bytes):
        """Forward the next client chunk containing ``pattern``, then swallow all that
        clients send; ``dropped_after_at`` is when that chunk reached the proxy (no later
        than the server got it)."""
        self._drop_after = pattern

    def _accept(self):
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            self._sockets += [client, server]
            threading.Thread(target=self._up, args=(client, server), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client), daemon=True).start()

    def _up(self, src, dst):
        while True:
            data = _recv(src)
            if not data:
                return _close(dst)
            now = time.monotonic()
            if self.dropping:
                continue
            if not _send(dst, data):
                return
            if self._drop_after is not None and self._drop_after in data:
                self._drop_after, self.dropped_after_at, self.dropping = None, now, True

    def _down(self, src, dst):
        # Chunks wait in a heap until due, so a delay holds back replies without reordering.
        pending, cond, done = [], threading.Condition(), []

        def deliver():
            while True:
                with cond:
                    while not pending and not done:
                        cond.wait()
                    if not pending:
                        return _close(dst)
                    due, seq, data = pending[0]
                    wait = due - time.monotonic()
                    if wait > 0:
                        cond.wait(wait)
                        continue
                    heapq.heappop(pending)
                if not _send(dst, data):
                    return

        threading.Thread(target=deliver, daemon=True).start()
        seq = last_due = 0
        while True:
            data = _recv(src)
            with cond:
                if not data:
                    done.append(True)
                    cond.notify()
                    return
                seq += 1
                last_due = max(last_due, time.monotonic() + self.reply_delay)  # keep order
                heapq.heappush(pending, (last_due, seq, data))
                cond.notify()

    def close(self):
        self._closed = True
        for s in self._sockets:
            _close(s)


def _recv(sock):
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def _send(sock, data) -> bool:
    try:
        sock.sendall(data)
        return True
    except OSError:
        return False


def _close(sock):
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
