#!/usr/bin/python3
"""Scrapes and abuses the daemons' /metrics ports for tests/metrics_test.sh and
tests/metrics_abuse_test.sh. Parsing is Prometheus' own Python client's
(prometheus_client.parser, Debian's python3-prometheus-client), not ours.

  metrics_client.py watch URL OUT [INTERVAL]   scrape until the port goes away; each scrape is
                                               parsed, kept in OUT/scrape-N.txt, and counters
                                               must never go down between two scrapes
  metrics_client.py get URL NAME [LABEL=VALUE] print one sample's value
  metrics_client.py abuse HOST PORT PID ROUNDS a hostile scraper (see abuse())
"""
import os
import socket
import sys
import time
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def fetch(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        if r.status != 200:
            raise RuntimeError(f"{url}: status {r.status}")
        ctype = r.headers.get("Content-Type", "")
        if not ctype.startswith("text/plain; version=0.0.4"):
            raise RuntimeError(f"{url}: Content-Type {ctype}")
        return r.read().decode()


def parse(text):
    """{(sample name, sorted labels): value} and {family: type}; raises on a bad text."""
    samples, types = {}, {}
    for fam in text_string_to_metric_families(text):
        types[fam.name] = fam.type
        for s in fam.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = (fam.type, s.value)
    return samples, types


def monotonic(kind, name):
    """Series that must never go down: counters, and histograms' buckets, sums and counts."""
    if kind == "counter":
        return True
    if kind == "histogram":
        return name.endswith(("_bucket", "_count", "_sum"))
    return False


def watch(url, out, interval):
    os.makedirs(out, exist_ok=True)
    prev, n, deadline = None, 0, time.time() + 300
    while time.time() < deadline:
        try:
            text = fetch(url)
        except (urllib.error.URLError, ConnectionError, socket.timeout):
            if n > 0:
                break  # the daemon exited
            time.sleep(0.05)
            continue
        samples, _ = parse(text)
        with open(os.path.join(out, f"scrape-{n}.txt"), "w") as f:
            f.write(text)
        if prev:
            for key, (kind, v) in samples.items():
                if key in prev and monotonic(kind, key[0]) and v < prev[key][1]:
                    sys.exit(f"{key} went down between scrapes {n-1} and {n}: {prev[key][1]} -> {v}")
        prev, n = samples, n + 1
        time.sleep(interval)
    print(n)


def get(url_or_file, name, labels):
    text = open(url_or_file).read() if os.path.exists(url_or_file) else fetch(url_or_file)
    samples, _ = parse(text)
    want = tuple(sorted(dict(l.split("=", 1) for l in labels).items()))
    print(repr(samples[(name, want)][1]))


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


def connect(host, port):
    s = socket.create_connection((host, port), timeout=5)
    return s


def answer(s):
    """What the server sends before it closes (it must close)."""
    s.settimeout(8)
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    s.close()
    return data


def abuse(host, port, pid, rounds):
    url = f"http://{host}:{port}/metrics"
    rss = []
    for r in range(rounds):
        # 1. Every bad request gets its own 4xx and a close, and only its connection closes:
        # a good connection opened before them is answered after them.
        good = connect(host, port)
        bad = {
            b"\x00\x01garbage\r\n\r\n": b"400",
            b"HELLO\r\n\r\n": b"400",
            b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 10000 + b"\r\n\r\n": b"431",
            b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc": b"405",
            b"GET /../../etc/passwd HTTP/1.0\r\n\r\n": b"404",
        }
        for req, code in bad.items():
            s = connect(host, port)
            try:
                s.sendall(req)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the oversized one may be refused before it is all sent
            got = answer(s)
            if not got.startswith(b"HTTP/1.1 " + code):
                sys.exit(f"round {r}: {req[:20]!r} answered {got[:40]!r}, expected {code!r}")
        good.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        got = answer(good)
        if not got.startswith(b"HTTP/1.1 200") or b"pstrain_model_version" not in got:
            sys.exit(f"round {r}: the good connection got {got[:60]!r}")
        # 2. 200 idle connections, and clients that ask and never read: the daemon keeps at
        # most its cap of them, and a real scrape still gets through.
        idle = []
        for _ in range(200):
            try:
                idle.append(connect(host, port))
            except OSError:
                pass
        for _ in range(20):
            s = connect(host, port)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
            s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            idle.append(s)
        text = fetch(url)
        samples, _ = parse(text)
        open_http = samples[("pstrain_metrics_open_connections", ())][1]
        if open_http > 32:
            sys.exit(f"round {r}: {open_http} metrics connections open, more than the cap")
        for s in idle:
            s.close()
        rss.append(rss_kib(pid))
        print(f"round {r}: rss {rss[-1]} KiB, {open_http:.0f} metrics connections open", flush=True)
    # Memory: the rounds after the first may not keep adding (the first pays for the
    # connection structs the allocator then keeps).
    growth = rss[-1] - rss[0]
    if growth > 4096:
        sys.exit(f"the daemon's RSS grew by {growth} KiB over {rounds} rounds: {rss}")
    print(f"rss over the rounds: {rss}")


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "watch":
        watch(sys.argv[2], sys.argv[3], float(sys.argv[4]) if len(sys.argv) > 4 else 0.1)
    elif cmd == "get":
        get(sys.argv[2], sys.argv[3], sys.argv[4:])
    elif cmd == "abuse":
        abuse(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        sys.exit(__doc__)
