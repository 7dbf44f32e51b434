"""A pstrain peer in a few lines of Python, for tests that play a worker who lies.

Frames as proto/pstrain.proto and proto/wire.h define them: a 16-byte prefix ("PSTR",
version 1, flags 0, header and payload lengths), a protobuf Header, raw float32 payloads.
Only what the tests need is encoded and decoded: varint, fixed64, double and nested message
fields, no protobuf library.
"""
import socket
import struct

MSG = dict(HELLO=1, WELCOME=2, PULL=3, WEIGHTS=4, PUSH=5, ACK=6, ERROR=7, STATUS_REQ=8,
           STATUS=9, SHUTDOWN=10, REPORT=11, BYE=12, HEARTBEAT=13, ROLLBACK=14, EVAL=15)


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def zigzag(n):
    return (n << 1) ^ (n >> 63)


def field(num, wire, payload):
    return varint(num << 3 | wire) + payload


def vfield(num, value):
    return field(num, 0, varint(value))


def msgfield(num, body):
    return field(num, 2, varint(len(body)) + body)


def dfield(num, value):
    return field(num, 1, struct.pack("<d", value))


def layer_chunks(spec, n, max_floats, group=16 * 1024):
    """The chunks of a whole vector along the layers, as model/model.h's pst_model_chunks cuts
    them, for the models these tests use: an input and dense layers."""
    sizes, width = [], None
    for line in spec.splitlines():
        t = line.split("#")[0].split()
        if not t or t[0] == "optimizer":
            continue
        if t[0] == "input":
            width = 1
            for d in t[1].split("x"):
                width *= int(d)
        elif t[0] == "dense":
            units = int(t[1])
            sizes.append(width * units + (0 if "bias=no" in t else units))
            width = units
        else:
            raise ValueError("peer.py cuts chunks for dense layers only, not " + t[0])
    assert sum(sizes) == n, (sizes, n)
    group = min(group, max_floats)
    starts, at, open_ = [0], 0, 0
    for size in sizes:
        end = at + size
        if size >= group:
            if open_:
                starts.append(at)
            starts += list(range(at + max_floats, end, max_floats)) + [end]
            open_ = 0
        else:
            if open_ and open_ + size > max_floats:
                starts.append(at)
                open_ = 0
            open_ += size
            if open_ >= group:
                starts.append(end)
                open_ = 0
        at = end
    if open_:
        starts.append(n)
    return starts


def frame(header, payload=b""):
    return b"PSTR" + struct.pack("<HHII", 1, 0, len(header), len(payload)) + header + payload


def decode(buf):
    """The fields of one protobuf message: {number: [values]}; nested messages stay bytes."""
    out, i = {}, 0
    while i < len(buf):
        key, i = _varint_at(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = _varint_at(buf, i)
        elif wire == 1:
            v, i = buf[i:i + 8], i + 8
        elif wire == 2:
            n, i = _varint_at(buf, i)
            v, i = buf[i:i + n], i + n
        elif wire == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError("wire type %d" % wire)
        out.setdefault(num, []).append(v)
    return out


def _varint_at(buf, i):
    n = shift = 0
    while True:
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i


def first(fields, num, default=0):
    return fields.get(num, [default])[0]


class Peer:
    """One connection to a ps, speaking as a worker (or as whatever a test makes it)."""

    def __init__(self, port, host="127.0.0.1", timeout=30):
        self.s = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""
        self.welcome = None

    def send(self, header, payload=b""):
        self.s.sendall(frame(header, payload))

    def read_frame(self):
        """(type, header fields, payload) of the next frame; None when the ps closed."""
        while True:
            if len(self.buf) >= 16:
                hlen, plen = struct.unpack("<II", self.buf[8:16])
                if len(self.buf) >= 16 + hlen + plen:
                    h = decode(self.buf[16:16 + hlen])
                    payload = self.buf[16 + hlen:16 + hlen + plen]
                    self.buf = self.buf[16 + hlen + plen:]
                    return first(h, 1), h, payload
            try:
                data = self.s.recv(1 << 20)
            except OSError:
                return None
            if not data:
                return None
            self.buf += data

    def read_until(self, wanted):
        """Frames until one of type `wanted` (returned); None when the ps closed first."""
        while True:
            f = self.read_frame()
            if f is None or f[0] == wanted:
                return f
            if f[0] == MSG["ERROR"]:
                return f

    def closed_by(self, send, what):
        """Calls send(), which the ps must answer by closing the connection: nothing but
        heartbeats and an ERROR may come before the close. A send cut short by the close
        (the ps closed at the first chunk, before the others were sent) is part of it."""
        try:
            send()
        except OSError:
            pass
        while True:
            f = self.read_frame()
            if f is None:
                return
            assert f[0] in (MSG["HEARTBEAT"], MSG["ERROR"]), f"{what} got frame type {f[0]}"

    def hello(self, name="peer", index=-1, train=0, test=0, classes=0, encodings=0):
        """encodings: the bits 1 << encoding of the tensor encodings the peer claims to know
        (issue 27; 0, as a worker from before them, says nothing)."""
        body = field(1, 2, varint(len(name)) + name.encode()) + vfield(3, zigzag(index))
        if train or test:
            body += vfield(5, train) + vfield(6, test) + vfield(7, classes)
        if encodings:
            body += vfield(10, encodings)
        self.send(vfield(1, MSG["HELLO"]) + msgfield(10, body))
        f = self.read_until(MSG["WELCOME"])
        if f is None or f[0] != MSG["WELCOME"]:
            return None
        w = decode(first(f[1], 11, b""))
        self.welcome = dict(index=first(w, 1), world=first(w, 2), n_params=first(w, 6),
                            epochs=first(w, 7), batch=first(w, 8), chunk=first(w, 10),
                            start_step=first(w, 13), push_encoding=first(w, 25),
                            pull_encoding=first(w, 26),
                            topk_momentum=struct.unpack("<d", first(w, 30, bytes(8)))[0])
        n, chunk = self.welcome["n_params"], self.welcome["chunk"]
        if first(w, 24):  # the chunks follow the layers (issue 26)
            self.starts = layer_chunks(first(w, 4, b"").decode(), n, chunk)
        else:
            self.starts = list(range(0, n, chunk)) + [n]
        return self.welcome

    def pull(self, version, last=False):
        """Asks for the weights of `version` (sync: the next one) and reads the whole reply;
        returns the version it carried, or None when the ps closed."""
        self.send(vfield(1, MSG["PULL"]) + vfield(2, version) + (vfield(5, 1) if last else b""))
        while True:
            f = self.read_frame()
            if f is None:
                return None
            if f[0] == MSG["WEIGHTS"] and first(f[1], 5):
                return first(f[1], 2)
            if f[0] in (MSG["ERROR"], MSG["SHUTDOWN"]):
                return None

    def push(self, version, value, value_bytes=None):
        """A whole gradient of `value` everywhere, computed on `version`, chunk by chunk.
        value_bytes: the payload of one value as given (e.g. an fp16 encoding's 2 bytes);
        default: float32 `value`."""
        n = self.welcome["n_params"]
        one = value_bytes if value_bytes is not None else struct.pack("<f", value)
        for off, end in zip(self.starts, self.starts[1:]):
            count = end - off
            last = end == n
            h = vfield(1, MSG["PUSH"]) + vfield(2, version) + vfield(3, off) + vfield(4, count)
            h += vfield(5, 1) if last else b""
            self.send(h, one * count)

    def push_raw(self, version, payload_of):
        """A whole push whose chunk payloads are payload_of(offset, count) as given (e.g. the
        (index, value) pairs of a top-k push)."""
        n = self.welcome["n_params"]
        for off, end in zip(self.starts, self.starts[1:]):
            count = end - off
            h = vfield(1, MSG["PUSH"]) + vfield(2, version) + vfield(3, off) + vfield(4, count)
            h += vfield(5, 1) if end == n else b""
            self.send(h, payload_of(off, count))

    def pull_payloads(self, version):
        """Like pull, but returns (version, [(offset, count, payload), ...]) of the reply."""
        self.send(vfield(1, MSG["PULL"]) + vfield(2, version))
        chunks = []
        while True:
            f = self.read_frame()
            if f is None or f[0] in (MSG["ERROR"], MSG["SHUTDOWN"]):
                return None, chunks
            if f[0] == MSG["WEIGHTS"]:
                chunks.append((first(f[1], 3), first(f[1], 4), f[2]))
                if first(f[1], 5):
                    return first(f[1], 2), chunks

    def report(self, epoch, correct, samples, loss_sum, is_eval=True, version=0):
        r = vfield(1, epoch) + vfield(2, 1) + (vfield(3, 1) if is_eval else b"")
        r += dfield(4, loss_sum) + vfield(5, correct) + vfield(6, samples) + dfield(7, 0.01)
        r += vfield(9, version) if version else b""
        self.send(vfield(1, MSG["REPORT"]) + msgfield(14, r))

    def simple(self, kind, version=0):
        self.send(vfield(1, MSG[kind]) + (vfield(2, version) if version else b""))

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass
