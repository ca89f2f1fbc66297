"""Hostile HTTP clients for aci-cli's tests (tests/http_hostile.rs).

    python3 hostile_client.py slowloris HOST PORT SOURCE_IP COUNT SECONDS
        Keeps COUNT connections open from SOURCE_IP, each having sent half a
        request head and nothing more; a connection the server closes is
        opened again at once. Prints "ready" once every one of the first
        COUNT connections was attempted.

    python3 hostile_client.py flood HOST PORT SOURCE_IP COUNT SECONDS
        Sends complete unauthenticated POST /mcp requests on COUNT keep-alive
        connections, each the next as soon as the answer came. Prints
        "ready" after the first answer.

Both stop by themselves after SECONDS, close everything and print one line
of counts: "opened=N closed_by_server=N failed=N answers=N status_401=N".
Loopback only: SOURCE_IP is a 127.0.0.0/8 address, so several processes get
their own ephemeral ports each.
"""

import errno
import resource
import selectors
import socket
import sys
import time

HALF_HEAD = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
FLOOD_BODY = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
FLOOD_REQUEST = (
    b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b"Content-Type: application/json\r\n"
    b"Accept: application/json, text/event-stream\r\n"
    b"Content-Length: " + str(len(FLOOD_BODY)).encode() + b"\r\n\r\n" + FLOOD_BODY
)


def main():
    mode, host, port, source, count, seconds = sys.argv[1:7]
    if not source.startswith("127."):
        sys.exit("loopback sources only")
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    Attack(mode, host, int(port), source, int(count), float(seconds)).run()


class Attack:
    def __init__(self, mode, host, port, source, count, seconds):
        self.mode = mode
        self.target = (host, port)
        self.source = source
        self.count = count
        self.deadline = time.monotonic() + seconds
        self.selector = selectors.DefaultSelector()
        self.counts = dict(opened=0, closed_by_server=0, failed=0, answers=0, status_401=0)
        self.attempted = 0
        self.announced = False

    def open_one(self):
        self.attempted += 1
        try:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        except OSError:
            self.counts["failed"] += 1
            return
        sock.setblocking(False)
        try:
            sock.bind((self.source, 0))
            code = sock.connect_ex(self.target)
        except OSError:
            sock.close()
            self.counts["failed"] += 1
            return
        if code not in (0, errno.EINPROGRESS):
            sock.close()
            self.counts["failed"] += 1
            return
        self.selector.register(sock, selectors.EVENT_WRITE, "connecting")

    def drop(self, sock):
        self.selector.unregister(sock)
        sock.close()

    def announce(self, condition):
        if condition and not self.announced:
            print("ready", flush=True)
            self.announced = True

    def run(self):
        for _ in range(self.count):
            self.open_one()
        while time.monotonic() < self.deadline:
            for key, _ in self.selector.select(timeout=0.1):
                self.event(key.fileobj, key.data)
            if self.mode == "slowloris":
                self.announce(self.attempted >= self.count)
            # Keep COUNT connections: reopen what was closed or failed.
            missing = self.count - len(self.selector.get_map())
            for _ in range(min(missing, 256)):
                self.open_one()
        for key in list(self.selector.get_map().values()):
            key.fileobj.close()
        print(" ".join(f"{k}={v}" for k, v in self.counts.items()), flush=True)

    def event(self, sock, state):
        if state == "connecting":
            if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                self.counts["failed"] += 1
                self.drop(sock)
                return
            self.counts["opened"] += 1
            try:
                sock.send(HALF_HEAD if self.mode == "slowloris" else FLOOD_REQUEST)
            except OSError:
                self.counts["closed_by_server"] += 1
                self.drop(sock)
                return
            self.selector.modify(sock, selectors.EVENT_READ, b"")
            return
        try:
            data = sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            self.counts["closed_by_server"] += 1
            self.drop(sock)
            return
        if self.mode == "slowloris":
            # An answer to half a head (408, 431): the server is done with it.
            self.counts["answers"] += 1
            self.drop(sock)
            return
        buffered = state + data
        # One answer per request: a status line, headers, a body of
        # Content-Length bytes.
        while b"\r\n\r\n" in buffered:
            head, rest = buffered.split(b"\r\n\r\n", 1)
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            if len(rest) < length:
                break
            buffered = rest[length:]
            self.counts["answers"] += 1
            if head.startswith(b"HTTP/1.1 401"):
                self.counts["status_401"] += 1
            self.announce(True)
            try:
                sock.send(FLOOD_REQUEST)
            except OSError:
                self.counts["closed_by_server"] += 1
                self.drop(sock)
                return
        self.selector.modify(sock, selectors.EVENT_READ, buffered)


if __name__ == "__main__":
    main()
