#!/usr/bin/python3
"""Network mutation fuzzing of a running pstrain-ps (issue 23): real sessions, recorded from
real workers through a proxy, are cut into frames, mutated and played back to the ps over
loopback, several connections at a time, for a bounded time.

    net_fuzz.py record LISTEN_PORT PS_PORT SESSIONS_DIR
        A proxy: each connection to LISTEN_PORT is forwarded to PS_PORT both ways, and what
        the client sent is saved as SESSIONS_DIR/session-N.bin when it closes.
    net_fuzz.py fuzz SESSIONS_DIR SECONDS SEED -- PS_COMMAND...
        Starts PS_COMMAND (which must take --listen 127.0.0.1:PORT, appended here), plays
        mutated sessions to it for SECONDS, starts it again whenever it exits by itself (a
        job that ended, every slot abandoned), then stops it with SIGTERM. Prints one line of
        figures. Exits non-zero when the ps died of a signal or with the sanitizers' exit
        code; the caller reads the sanitizers' reports (their log_path files and the ps's
        log), which are the verdict.

The mutations, on whole frames and on their bytes: frames dropped, repeated, swapped, or
taken from another session; a frame of another type spliced in (every type, including those
only a ps sends); a header's bytes flipped, replaced or cut; the prefix's lengths changed;
a payload's floats set to NaN, infinity, 3e38 or noise; the session cut at any byte; the
connection half-closed, reset, or left silent.
"""
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

# tests/peer.py: the protocol's varints.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from peer import varint  # noqa: E402

MSG_TYPES = range(0, 17)


def frames_of(data):
    """The session's frames as (prefix, header, payload) bytes; a tail that is no frame is
    kept as one raw piece."""
    out, i = [], 0
    while i + 16 <= len(data):
        if data[i:i + 4] != b"PSTR":
            break
        hlen, plen = struct.unpack("<II", data[i + 8:i + 16])
        end = i + 16 + hlen + plen
        if end > len(data):
            break
        out.append([data[i:i + 16], data[i + 16:i + 16 + hlen], data[i + 16 + hlen:end]])
        i = end
    if i < len(data):
        out.append([b"", data[i:], b""])
    return out


def spliced(rng):
    """A frame of any message type, well formed enough to reach the ps's rules."""
    t = rng.choice(MSG_TYPES)
    h = varint(1 << 3) + varint(t) + varint(2 << 3) + varint(rng.randrange(0, 300))
    payload = b""
    if t in (4, 5):  # WEIGHTS, PUSH: a small chunk
        n = rng.choice((1, 16, 1024))
        h += varint(3 << 3) + varint(rng.choice((0, 1024, 24000, 1 << 40)))
        h += varint(4 << 3) + varint(n) + varint(5 << 3) + varint(rng.randrange(2))
        payload = struct.pack("<f", rng.choice((0.0, 1.0, float("nan"), 3e38))) * n
    elif t == 1:  # HELLO: an index, maybe data facts
        body = varint(3 << 3) + varint(rng.randrange(0, 8))
        if rng.random() < 0.5:
            body += varint(5 << 3) + varint(rng.choice((600, 6400000)))
            body += varint(6 << 3) + varint(100) + varint(7 << 3) + varint(10)
        h += varint(10 << 3 | 2) + varint(len(body)) + body
    elif t == 11:  # REPORT
        body = varint(1 << 3) + varint(rng.randrange(0, 4)) + varint(3 << 3) + varint(1)
        body += varint(5 << 3) + varint(rng.randrange(0, 200)) + varint(6 << 3) + varint(100)
        h += varint(14 << 3 | 2) + varint(len(body)) + body
    return [b"PSTR" + struct.pack("<HHII", 1, 0, len(h), len(payload)), h, payload]


def mutate(frames, others, rng):
    # Mostly the session's beginning (registration and the first steps, where most of the
    # states are), sometimes all of it.
    if rng.random() < 0.9:
        frames = frames[:rng.randrange(1, min(len(frames), 60) + 1)]
    frames = [list(f) for f in frames]
    for _ in range(rng.randrange(1, 6)):
        if not frames:
            frames.append(spliced(rng))
            continue
        k = rng.randrange(len(frames))
        m = rng.randrange(12)
        f = frames[k]
        if m == 0:
            del frames[k]
        elif m == 1:
            frames.insert(k, list(f))
        elif m == 2 and len(frames) > 1:
            j = rng.randrange(len(frames))
            frames[k], frames[j] = frames[j], frames[k]
        elif m == 3 and others:
            o = rng.choice(others)
            if o:
                frames.insert(k, list(rng.choice(o)))
        elif m == 4:
            frames.insert(k, spliced(rng))
        elif m == 5 and f[1]:
            h = bytearray(f[1])
            for _ in range(rng.randrange(1, 4)):
                h[rng.randrange(len(h))] ^= 1 << rng.randrange(8)
            f[1] = bytes(h)
        elif m == 6 and f[1]:
            h = bytearray(f[1])
            h[rng.randrange(len(h))] = rng.randrange(256)
            f[1] = bytes(h)
        elif m == 7 and f[0]:
            hlen, plen = struct.unpack("<II", f[0][8:16])
            if rng.random() < 0.5:
                hlen = rng.choice((0, 1, hlen + 1, max(hlen - 1, 0), 65536, 65537, 1 << 31))
            else:
                plen = rng.choice((0, 4, plen + 4, max(plen - 4, 0), 1 << 28, (1 << 32) - 1))
            f[0] = f[0][:8] + struct.pack("<II", hlen, plen)
        elif m == 8 and len(f[2]) >= 4:
            p = bytearray(f[2])
            v = rng.choice((float("nan"), float("inf"), -float("inf"), 3e38, 1e-45, 0.0))
            for _ in range(rng.randrange(1, 8)):
                i = rng.randrange(len(p) // 4) * 4
                p[i:i + 4] = struct.pack("<f", v)
            f[2] = bytes(p)
        elif m == 9 and f[1]:
            f[1] = f[1][:rng.randrange(len(f[1]))]
        elif m == 10 and f[0]:
            f[0] = bytes([rng.randrange(256)]) + f[0][1:] if rng.random() < 0.2 else f[0][:4] + \
                struct.pack("<HH", rng.choice((0, 1, 2)), rng.randrange(2)) + f[0][8:]
        elif m == 11 and f[1]:
            # The type field (the header's first varint, as every encoder writes it first).
            f[1] = varint(1 << 3) + varint(rng.choice(MSG_TYPES)) + f[1][2:]
    data = b"".join(b"".join(f) for f in frames)
    if data and rng.random() < 0.2:
        data = data[:rng.randrange(len(data))]
    return data


def play(port, data, rng, stats):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
    except OSError:
        stats["refused"] += 1
        return
    stats["connections"] += 1
    try:
        # In pieces, with the ps's answers read as they come (never waited for), as a real
        # peer's bytes arrive.
        i = 0
        while i < len(data):
            n = rng.choice((1, 7, 100, 4096, 65536, 1 << 20))
            s.settimeout(2)
            s.sendall(data[i:i + n])
            i += n
            s.settimeout(0)
            try:
                if s.recv(1 << 20) == b"":
                    stats["closed_by_ps"] += 1
                    return
            except (BlockingIOError, socket.timeout):
                pass
        end = rng.randrange(4)
        if end == 0:
            s.shutdown(socket.SHUT_WR)
        if end == 1:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return
        s.settimeout(0.3 if end == 2 else 0.02)  # 2: a silent peer, for a while
        try:
            while s.recv(1 << 20):
                pass
        except (socket.timeout, OSError):
            pass
    except OSError:
        stats["reset"] += 1
    finally:
        s.close()


def record(listen, ps_port, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", listen))
    srv.listen(64)
    count = [0]

    def pipe(a, b, keep):
        try:
            while True:
                d = a.recv(1 << 20)
                if not d:
                    break
                if keep is not None:
                    keep.append(d)
                b.sendall(d)
        except OSError:
            pass
        for x in (a, b):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle(c):
        n = count[0]
        count[0] += 1
        try:
            p = socket.create_connection(("127.0.0.1", ps_port))
        except OSError:
            c.close()
            return
        sent = []
        t = threading.Thread(target=pipe, args=(p, c, None), daemon=True)
        t.start()
        pipe(c, p, sent)
        t.join(5)
        with open(os.path.join(out_dir, "session-%d.bin" % n), "wb") as f:
            f.write(b"".join(sent))
        c.close()
        p.close()

    while True:
        c, _ = srv.accept()
        threading.Thread(target=handle, args=(c,), daemon=True).start()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def fuzz(sessions_dir, seconds, seed, ps_cmd):
    rng = random.Random(seed)
    sessions = []
    for name in sorted(os.listdir(sessions_dir)):
        with open(os.path.join(sessions_dir, name), "rb") as f:
            fr = frames_of(f.read())
        if fr:
            sessions.append(fr)
    if not sessions:
        print("net_fuzz: no recorded sessions in %s" % sessions_dir)
        return 2
    stats = dict(connections=0, refused=0, closed_by_ps=0, reset=0, starts=0, inputs=0)
    log = open(os.environ.get("NET_FUZZ_PS_LOG", "/dev/null"), "ab")
    deadline = time.time() + seconds
    bad = 0
    while time.time() < deadline and not bad:
        port = free_port()
        ps = subprocess.Popen(ps_cmd + ["--listen", "127.0.0.1:%d" % port], stdout=log,
                              stderr=subprocess.STDOUT)
        stats["starts"] += 1
        for _ in range(200):  # until it listens
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if ps.poll() is not None:
                    break
                time.sleep(0.05)
        while time.time() < deadline and ps.poll() is None:
            threads = []
            for _ in range(rng.randrange(1, 5)):
                data = mutate(rng.choice(sessions), sessions, rng)
                stats["inputs"] += 1
                t = threading.Thread(target=play, args=(port, data, random.Random(rng.random()),
                                                        stats))
                t.start()
                threads.append(t)
            for t in threads:
                t.join()
        if ps.poll() is None:
            ps.send_signal(signal.SIGTERM)
            try:
                ps.wait(60)
            except subprocess.TimeoutExpired:
                ps.kill()
                ps.wait()
                print("net_fuzz: the ps did not stop within 60 s of SIGTERM")
                bad = 1
        rc = ps.returncode
        # 0 finished, 1 aborted (every slot lost), 3 stopped on request; a signal or the
        # sanitizers' exit code is a finding.
        if rc not in (0, 1, 3):
            print("net_fuzz: the ps exited with status %d" % rc)
            bad = 1
    print("net_fuzz: %d inputs over %d connections in %d s (%d ps starts; %d closed by the ps, "
          "%d resets, %d refused)" % (stats["inputs"], stats["connections"], seconds,
                                      stats["starts"], stats["closed_by_ps"], stats["reset"],
                                      stats["refused"]))
    return bad


if __name__ == "__main__":
    if len(sys.argv) >= 5 and sys.argv[1] == "record":
        record(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    elif len(sys.argv) >= 6 and sys.argv[1] == "fuzz" and sys.argv[5] == "--":
        sys.exit(fuzz(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), sys.argv[6:]))
    else:
        print(__doc__)
        sys.exit(2)
