#!/usr/bin/env python3
"""A bounded slowloris attacker for tests/e2e/serve_slowloris.sh (loopback only).

    slowloris.py PORT MODE COUNT SECONDS [--rate N] [--sources N]

MODE trickle: COUNT connections, each sending one byte of a never-ending
request header every 0.5 s.  MODE idle: COUNT connections that send
nothing.  A connection the server closes is opened again (at most --rate new
connections per second, default 5000), so COUNT stay open as far as the server
allows: the attack does not fade when the server cuts connections.  Stops
after SECONDS.  --sources N spreads the connections over N source
addresses 127.0.0.2.. (all loopback), so that only the total cap applies to
them, not the per-address one.  Prints one line of key=value counters at the end:
opened, cut (closed by the server), open_max (most open at once), and
lifetime_p50_s / lifetime_max_s of the connections the server cut.
"""
import errno
import resource
import selectors
import socket
import sys
import time

HOST = "127.0.0.1"  # loopback only, whatever the arguments say
HEADER = b"GET /health HTTP/1.1\r\nHost: x\r\nX-a: " + b"a" * 4000


def main():
    port, mode, count, seconds = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    rate, sources = 5000, 0
    if "--rate" in sys.argv:
        rate = int(sys.argv[sys.argv.index("--rate") + 1])
    if "--sources" in sys.argv:
        sources = int(sys.argv[sys.argv.index("--sources") + 1])
    assert 0 <= sources <= 250, sources
    assert mode in ("trickle", "idle"), mode
    assert 0 < count <= 20000 and 0 < seconds <= 120, "bounded: at most 20,000 connections, 120 s"
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, count + 256) if hard != resource.RLIM_INFINITY else count + 256
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))

    sel = selectors.DefaultSelector()
    conns = {}  # socket -> [opened_at, bytes_sent]
    opened = cut = open_max = 0
    lifetimes = []
    t_end = time.monotonic() + seconds
    budget, budget_t = 0.0, time.monotonic()
    # A steady rate, in bursts of at most 10 ms of it (and 64): the bucket
    # once held a whole second, and a loop iteration slowed by a server's
    # cuts (6-12 ms) then opened 250 connections at once, and up to 1,456
    # (measured under AddressSanitizer, at 5,000/s): more than the 192 a
    # probe that has connected but not yet sent its request outlives.
    burst = max(1, min(64, rate // 100))
    next_trickle = time.monotonic() + 0.5

    def open_one():
        nonlocal opened
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        if sources:
            s.bind((f"127.0.0.{2 + opened % sources}", 0))
        rc = s.connect_ex((HOST, port))
        if rc not in (0, errno.EINPROGRESS):
            s.close()
            return False
        conns[s] = [time.monotonic(), 0]
        sel.register(s, selectors.EVENT_READ)
        opened += 1
        return True

    def drop(s, by_server):
        nonlocal cut
        st = conns.pop(s)
        sel.unregister(s)
        s.close()
        if by_server:
            cut += 1
            lifetimes.append(time.monotonic() - st[0])

    while time.monotonic() < t_end:
        now = time.monotonic()
        budget = min(burst, budget + (now - budget_t) * rate)
        budget_t = now
        while len(conns) < count and budget >= 1:
            budget -= 1
            if not open_one():
                break
        open_max = max(open_max, len(conns))
        for key, _ in sel.select(timeout=0.005 if len(conns) < count else 0.05):
            s = key.fileobj
            try:
                data = s.recv(4096)
            except (ConnectionError, OSError):
                data = b""
            if not data:  # closed (or reset) by the server; a response counts too
                drop(s, True)
        if mode == "trickle" and time.monotonic() >= next_trickle:
            next_trickle += 0.5
            for s, st in list(conns.items()):
                i = st[1] % len(HEADER)
                try:
                    s.send(HEADER[i:i + 1])
                    st[1] += 1
                except BlockingIOError:
                    pass  # still connecting
                except OSError:
                    drop(s, True)
    for s in list(conns):
        drop(s, False)
    lifetimes.sort()
    p50 = lifetimes[len(lifetimes) // 2] if lifetimes else 0.0
    mx = lifetimes[-1] if lifetimes else 0.0
    print(f"opened={opened} cut={cut} open_max={open_max} "
          f"lifetime_p50_s={p50:.2f} lifetime_max_s={mx:.2f}", flush=True)


if __name__ == "__main__":
    main()
