"""A ps that stalls or lies, for the worker's tests: a proxy between one worker and a real ps
that forwards both ways frame by frame (proto/wire.h: a 16-byte prefix, a protobuf header, a
payload) and, on the connections it is told to, changes what the ps sends.

    ps_proxy.py LISTEN PS_PORT MARKER stall N
        On the first connection, once N replies have passed whole, forwards the next
        reply's first two chunks and then nothing more from the ps (it keeps reading, so
        that the ps is never blocked), until either end closes. Later connections are
        forwarded whole.
    ps_proxy.py LISTEN PS_PORT MARKER lie N
        Each connection that gets as far as the third chunk of its N-th reply is told there
        the next lie of LIES not yet told (a connection the ps refuses tells none), and is
        forwarded as it goes otherwise; once every lie is told, connections are forwarded
        whole.

    ps_proxy.py LISTEN PS_PORT MARKER nanscale N
        On the first connection, the first delta chunk (Header.delta, --pull-compress delta)
        from the N-th reply on gets a scale that is a NaN; the rest is forwarded whole.

    ps_proxy.py LISTEN PS_PORT MARKER badpair N
        On the first connection, the first sparse delta chunk (Header.sparse) with a pair,
        from the N-th reply on, names an index past the chunk's end; the rest is forwarded
        whole.

    ps_proxy.py LISTEN PS_PORT MARKER baddata N
        On the first connection, the N-th DATA frame (the data handed out by the ps, issue
        28) names a range past the end of the training set; the rest is forwarded whole.

    ps_proxy.py LISTEN PS_PORT MARKER badmomentum N
        On the first connection, the WELCOME says the workers keep a momentum of N (its
        field topk_momentum appended again, which a protobuf reader takes over the first);
        the rest is forwarded whole.

    ps_proxy.py LISTEN PS_PORT MARKER stall_push N
        On the first connection, once N PUSH frames have passed whole, forwards the next
        one's prefix, header and half its payload, and then nothing more from the worker
        (it keeps reading, so that the worker is never blocked), until either end closes.
        Later connections are forwarded whole.

    ps_proxy.py LISTEN PS_PORT MARKER refuse N
        Closes each of the first N connections as soon as it is accepted, without a byte
        (a ps out of descriptors, whose libuv accepts and closes), and forwards later ones
        whole.

Each time it stalls, lies or refuses it appends a line to MARKER. In the modes "stall" and "lie" only
the ps's side is changed, and what the worker sends is forwarded as it comes; in
"stall_push" only the worker's side is.
"""
import socket
import struct
import sys
import threading

WELCOME = 2
WEIGHTS = 4
PUSH = 5
DATA = 16

# What a lying ps sends in place of one WEIGHTS chunk, and the worker's error it must meet.
LIES = [
    "offset",     # a chunk past the end of the shard's part
    "count",      # a header whose count does not match the payload's length
    "magic",      # a prefix that is not pstrain's
    "huge",       # a header length far over the cap
    "type",       # a frame type that does not exist
    "twice",      # the reply's last chunk twice
    "reorder",    # two chunks swapped: not a lie (each says its offset); must train on
]


def varint(b, i):
    v = s = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return v, i


def put_varint(v):
    out = bytearray()
    while True:
        c = v & 0x7F
        v >>= 7
        if v:
            out.append(c | 0x80)
        else:
            out.append(c)
            return bytes(out)


def fields(h):
    """The header's varint fields: 1 type, 2 version, 3 offset, 4 count, 5 last."""
    f, i = {}, 0
    while i < len(h):
        key, i = varint(h, i)
        wt = key & 7
        if wt == 0:
            f[key >> 3], i = varint(h, i)
        elif wt == 2:
            n, i = varint(h, i)
            i += n
        elif wt == 1:
            i += 8
        elif wt == 5:
            i += 4
        else:
            break
    return f


def with_welcome_field(h, num, raw):
    """The header h with `raw` (a whole field, key included) appended to its WELCOME (field
    11), every other field as it was."""
    out, i = bytearray(), 0
    while i < len(h):
        start = i
        key, i = varint(h, i)
        wt = key & 7
        if wt == 0:
            _, i = varint(h, i)
        elif wt == 1:
            i += 8
        elif wt == 5:
            i += 4
        elif wt == 2:
            n, j = varint(h, i)
            if key >> 3 == 11:
                body = h[j:j + n] + raw
                out += put_varint(key) + put_varint(len(body)) + body
                i = j + n
                continue
            i = j + n
        out += h[start:i]
    return bytes(out)


def chunk_header(f):
    """A WEIGHTS header with fields f (as pst_wire_encode_chunk writes one)."""
    return b"".join(put_varint(k << 3) + put_varint(f[k]) for k in sorted(f) if f[k])


def frame(prefix, head, payload):
    return prefix[:8] + struct.pack("<II", len(head), len(payload)) + head + payload


def exact(s, n):
    b = bytearray()
    while len(b) < n:
        c = s.recv(min(n - len(b), 1 << 20))
        if not c:
            raise EOFError
        b += c
    return bytes(b)


def close_both(a, b):
    for s in (a, b):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def up(w, p, stall_after, marker):
    """The worker's side: as it comes, or (stall_after >= 0) frame by frame until a PUSH
    stops halfway after stall_after whole ones."""
    pushes = 0
    try:
        while stall_after < 0:
            c = w.recv(65536)
            if not c:
                break
            p.sendall(c)
        while stall_after >= 0:
            prefix = exact(w, 16)
            on_stream(prefix)
            hlen, plen = struct.unpack("<II", prefix[8:16])
            head = exact(w, hlen)
            payload = exact(w, plen)
            if fields(head).get(1) == PUSH and plen > 0:
                if pushes == stall_after:
                    p.sendall(prefix + head + payload[: plen // 2])
                    open(marker, "a").write("stalled push\n")
                    while w.recv(65536):
                        pass
                    break
                pushes += 1
            p.sendall(prefix + head + payload)
    except (OSError, EOFError):
        pass
    close_both(w, p)


def on_stream(prefix):
    """A frame whose payload is in shared memory (the ring flag, proto/wire.h) leaves the
    proxy nothing to forward or change: the worker behind it must run with --shm false."""
    if struct.unpack("<H", prefix[6:8])[0] != 0:
        sys.stderr.write("ps_proxy: a frame in shared memory: run the proxied worker with --shm false\n")
        raise EOFError


told = 0  # lies told so far, over every connection
told_lock = threading.Lock()


def next_lie():
    global told
    with told_lock:
        if told >= len(LIES):
            return None
        told += 1
        return LIES[told - 1]


def down(p, w, mode, n, k, marker):
    """The ps's side: whole, stalled (mode "stall", k = 0) or with a lie (mode "lie")."""
    lie = "due" if mode == "lie" else None
    nan_told = False
    stall = mode == "stall" and k == 0
    replies = chunks = datas = 0
    held = None  # "reorder": the chunk held back to go after the next one
    try:
        while True:
            prefix = exact(p, 16)
            on_stream(prefix)
            hlen, plen = struct.unpack("<II", prefix[8:16])
            head = exact(p, hlen)
            payload = exact(p, plen)
            f = fields(head)
            weights = f.get(1) == WEIGHTS
            due = weights and replies == n and chunks == 2
            out = frame(prefix, head, payload)
            if mode == "nanscale" and k == 0 and weights and replies >= n and f.get(18) and not nan_told:
                open(marker, "a").write("nanscale\n")
                payload = struct.pack("<f", float("nan")) + payload[4:]
                out = frame(prefix, head, payload)
                nan_told = True
            if mode == "badpair" and k == 0 and weights and replies >= n and f.get(21) and \
                    len(payload) >= 8 and not nan_told:
                open(marker, "a").write("badpair\n")
                payload = struct.pack("<I", 0xFFFFFFFF) + payload[4:]
                out = frame(prefix, head, payload)
                nan_told = True
            if mode == "badmomentum" and k == 0 and f.get(1) == WELCOME:
                open(marker, "a").write("badmomentum\n")
                head = with_welcome_field(head, 30, put_varint(30 << 3 | 1) + struct.pack("<d", n))
                out = frame(prefix, head, payload)
            if mode == "baddata" and k == 0 and f.get(1) == DATA:
                datas += 1
                if datas == n:
                    open(marker, "a").write("baddata\n")
                    # Header: type DATA, version; data (field 19): epoch 1, positions
                    # [10**9, +1), far past any training set.
                    rng = put_varint(1 << 3) + put_varint(1) + put_varint(2 << 3) + \
                        put_varint(10**9) + put_varint(3 << 3) + put_varint(1)
                    head = chunk_header({1: DATA, 2: f.get(2, 0)}) + put_varint(19 << 3 | 2) + \
                        put_varint(len(rng)) + rng
                    out = frame(prefix, head, b"")
            if due and stall:
                open(marker, "a").write("stalled\n")
                while p.recv(65536):
                    pass
                break
            if due and lie == "due":
                lie = next_lie()
            if due and lie and lie != "twice":
                open(marker, "a").write(lie + "\n")
                if lie in ("offset", "count"):
                    g = dict(f)
                    if lie == "offset":
                        g[3] = f.get(3, 0) + (1 << 30)
                    else:
                        g[4] = f.get(4, 0) + 1
                    out = frame(prefix, chunk_header(g), payload)
                elif lie == "magic":
                    out = b"XXXX" + out[4:]
                elif lie == "huge":
                    out = prefix[:8] + struct.pack("<II", 1 << 30, 0)
                elif lie == "type":
                    out = frame(prefix, put_varint(1 << 3) + put_varint(99), b"")
                elif lie == "reorder":
                    held = out
                    out = b""
                lie = None
            elif held is not None and weights:
                out, held = out + held, None
            if out:
                w.sendall(out)
            if weights:
                chunks += 1
                if f.get(5):
                    if lie == "twice" and replies == n:
                        open(marker, "a").write("twice\n")
                        w.sendall(out)
                        lie = None
                    replies, chunks = replies + 1, 0
    except (OSError, EOFError):
        pass
    close_both(p, w)


def main():
    listen, ps_port, marker, mode, n = (int(sys.argv[1]), int(sys.argv[2]), sys.argv[3],
                                        sys.argv[4], int(sys.argv[5]))
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", listen))
    srv.listen(8)
    k = 0
    while True:
        w, _ = srv.accept()
        if mode == "refuse" and k < n:
            open(marker, "a").write("refused\n")
            w.close()
            k += 1
            continue
        try:
            p = socket.create_connection(("127.0.0.1", ps_port))
        except OSError:
            w.close()
            continue
        stall_after = n if mode == "stall_push" and k == 0 else -1
        threading.Thread(target=up, args=(w, p, stall_after, marker), daemon=True).start()
        threading.Thread(target=down, args=(p, w, mode, n, k, marker), daemon=True).start()
        k += 1


if __name__ == "__main__":
    main()
