"""The HTTP server under ctrain_keras.Progress: the C worker's server
(include/common/ctrain/httpd.h; docs/ARCHITECTURE.md, "Foreign input has
limits") in Python. No TensorFlow here: its tests run without it.

One thread (serve_forever's) runs one poll loop over the listening socket
and at most max_connections (256) non-blocking connections; no thread per
connection. Each connection has request_timeout (2 s) from its accept to
send its request head and take the answer, after which it is dropped. A
head (through its blank line) must fit in head_max (16 KiB) bytes, or the
answer is 431. Every connection gets one answer, made by the handler class
(a BaseHTTPRequestHandler: do_GET as usual) on the loop's thread, and is
closed; after the answer the server shuts its side and reads what the
client still sends (at most 64 KiB, for at most 1 s, within the deadline)
before it closes, so unread bytes never turn the close into a reset that
would lose the answer. Nothing else grows: a connection holds at most
head_max bytes and its answer.

Shedding: when the table is full, a new connection takes the slot of one
that has had 50 ms: one draining first, then one that sent nothing, then
one with a partial head, then one being answered, the oldest first (the C
server's order); connections wait in the listen backlog (SOMAXCONN) until
one of them may be shed, and a quarter of the table is accepted per round.
Idle connections therefore never lock out the controller, which sends its
request at once: it is answered while they are held.

The loop reads and answers what has arrived before it drops connections
past their deadline, so a loop kept from running (the training holding the
GIL) does not drop a request that came in time.
"""

import http.server
import io
import re
import selectors
import socket
import sys
import threading
import time
import traceback

MAX_CONNECTIONS = 256
REQUEST_TIMEOUT = 2.0  # seconds from the accept: the head, the answer, the drain
HEAD_MAX = 16384  # bytes of a request head, its blank line included
GRACE = 0.05  # seconds: a connection younger than this is never shed
DRAIN_TIME = 1.0
DRAIN_MAX = 65536
ACCEPT_PAUSE = 0.1  # seconds without accepting after EMFILE and the like

# A connection's states, in the order connections are shed.
DRAINING, SILENT, PARTIAL, ANSWERING = range(4)

_HEAD_END = re.compile(rb"\n\r?\n")


class _Conn:
    __slots__ = ("sock", "addr", "born", "deadline", "state", "buf", "out", "n")

    def __init__(self, sock, addr, born, timeout):
        self.sock, self.addr, self.born = sock, addr, born
        self.deadline = born + timeout
        self.state, self.buf, self.out, self.n = SILENT, bytearray(), b"", 0


class Handler(http.server.BaseHTTPRequestHandler):
    """The base of Progress's handler: do_GET as with BaseHTTPRequestHandler,
    for a head the server has read (bounded); the answer goes to a buffer
    the server sends. One request per connection. It runs on the server's
    one thread, so it must not block (Progress's copies its snapshot under a
    lock held only for the copy)."""

    def __init__(self, request, client_address, server, head):
        self._head = head  # None: over head_max
        super().__init__(request, client_address, server)

    def setup(self):
        self.connection = self.request
        self.rfile = io.BytesIO(self._head or b"")
        self.wfile = io.BytesIO()

    def handle(self):
        self.close_connection = True
        if self._head is not None:
            return self.handle_one_request()
        self.requestline, self.request_version, self.command = "", "", ""
        self._send(431, "too large\n")

    def finish(self):  # the server takes wfile's bytes
        pass

    def log_message(self, *args):  # never log the request (its header has the token)
        pass

    def _send(self, code, body, ctype="text/plain; charset=utf-8", extra=()):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)


class Server:
    """Serves handler_class (a Handler) on server_address (host, port) with
    the limits of the module doc: serve_forever on a thread of its own,
    shutdown from another, then server_close (the socketserver calls)."""

    def __init__(
        self,
        server_address,
        handler_class,
        max_connections=MAX_CONNECTIONS,
        request_timeout=REQUEST_TIMEOUT,
        head_max=HEAD_MAX,
    ):
        if max_connections < 1 or request_timeout <= 0 or head_max < 16:
            raise ValueError("max_connections >= 1, request_timeout > 0, head_max >= 16")
        self.RequestHandlerClass = handler_class
        self.max_connections, self.request_timeout = int(max_connections), float(request_timeout)
        self.head_max = int(head_max)
        self.shed = 0  # connections dropped to make room
        self._conns = set()
        self._stop = False
        self._running = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind(server_address)
            self.socket.listen(socket.SOMAXCONN)
            self.socket.setblocking(False)
        except BaseException:
            self.server_close()
            raise
        self.server_address = self.socket.getsockname()
        self.server_port = self.server_address[1]

    def connections(self):
        """The connections held now."""
        return len(self._conns)

    def serve_forever(self):
        with self._running:
            sel = selectors.DefaultSelector()
            sel.register(self._wake_r, selectors.EVENT_READ, "wake")
            listening, accept_after = False, 0.0
            try:
                while not self._stop:
                    now = time.monotonic()
                    can = now >= accept_after and self._room(now)
                    if can != listening:
                        if can:
                            sel.register(self.socket, selectors.EVENT_READ, "listen")
                        else:
                            sel.unregister(self.socket)
                        listening = can
                    for key, _ in sel.select(self._wait(now, accept_after, listening)):
                        if key.data == "wake":
                            self._wake_r.recv(64)
                        elif key.data == "listen":
                            if not self._accept(sel):
                                accept_after = time.monotonic() + ACCEPT_PAUSE
                        elif key.data in self._conns:
                            self._step(sel, key.data)
                    now = time.monotonic()
                    for c in [c for c in self._conns if now >= c.deadline]:
                        self._close(sel, c)
            finally:
                for c in list(self._conns):
                    self._close(sel, c)
                sel.close()

    def shutdown(self):
        """Stops serve_forever and waits for it to return."""
        self._stop = True
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        with self._running:
            pass

    def server_close(self):
        for s in (self.socket, self._wake_r, self._wake_w):
            s.close()

    # ---- the loop's steps ----------------------------------------------------

    def _wait(self, now, accept_after, listening):
        """Seconds until something is due: a deadline, a connection that may
        be shed, accepting again."""
        due = [c.deadline for c in self._conns]
        if now < accept_after:
            due.append(accept_after)
        elif not listening:
            due.append(min(c.born for c in self._conns) + GRACE)
        return max(min(due) - now, 0.0) if due else None

    def _room(self, now):
        return len(self._conns) < self.max_connections or self._victim(now) is not None

    def _victim(self, now):
        ripe = [c for c in self._conns if now - c.born >= GRACE]
        return min(ripe, key=lambda c: (c.state, c.born)) if ripe else None

    def _accept(self, sel):
        """Accepts up to a quarter of the table; False when accepting must
        pause (out of descriptors)."""
        for _ in range(max(self.max_connections // 4, 1)):
            now = time.monotonic()
            victim = None
            if len(self._conns) >= self.max_connections:
                victim = self._victim(now)
                if victim is None:
                    return True
            try:
                sock, addr = self.socket.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return True
            except OSError:  # EMFILE, ENFILE, ENOBUFS, ENOMEM
                return False
            if victim is not None:
                self._close(sel, victim)
                self.shed += 1
            sock.setblocking(False)
            c = _Conn(sock, addr, now, self.request_timeout)
            self._conns.add(c)
            sel.register(sock, selectors.EVENT_READ, c)
        return True

    def _step(self, sel, c):
        try:
            if c.state == ANSWERING:
                self._send(sel, c)
            elif c.state == DRAINING:
                got = c.sock.recv(4096)
                c.n += len(got)
                if not got or c.n > DRAIN_MAX:
                    self._close(sel, c)
            else:
                self._read(sel, c)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._close(sel, c)

    def _read(self, sel, c):
        got = c.sock.recv(self.head_max - len(c.buf))
        if not got:
            return self._close(sel, c)
        start = max(len(c.buf) - 2, 0)
        c.buf += got
        c.state = PARTIAL
        m = _HEAD_END.search(c.buf, start)
        if m:
            head = bytes(c.buf[: m.end()])
        elif len(c.buf) >= self.head_max:
            head = None
        else:
            return
        c.buf = bytearray()
        try:
            c.out = self.RequestHandlerClass(c.sock, c.addr, self, head).wfile.getvalue()
        except Exception:
            self.handle_error(c.sock, c.addr)
            return self._close(sel, c)
        c.state = ANSWERING
        sel.modify(c.sock, selectors.EVENT_WRITE, c)
        self._send(sel, c)

    def _send(self, sel, c):
        c.out = c.out[c.sock.send(c.out) :]
        if c.out:
            return
        c.sock.shutdown(socket.SHUT_WR)
        c.state, c.n = DRAINING, 0
        c.deadline = min(c.deadline, time.monotonic() + DRAIN_TIME)
        sel.modify(c.sock, selectors.EVENT_READ, c)

    def _close(self, sel, c):
        self._conns.discard(c)
        try:
            sel.unregister(c.sock)
        except (KeyError, ValueError):
            pass
        c.sock.close()

    def handle_error(self, request, client_address):
        """A handler raised: as socketserver, the traceback on stderr."""
        print("-" * 40, file=sys.stderr)
        print(
            "Exception occurred during processing of request from", client_address, file=sys.stderr
        )
        traceback.print_exc()
        print("-" * 40, file=sys.stderr)
