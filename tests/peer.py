"""A pstrain peer in a few lines of Python, for tests that play a worker who lies.

Frames as proto/pstrain.proto and proto/wire.h define them: a 16-byte prefix ("PSTR",
version 1, flags 0, header and payload lengths), a protobuf Header, raw float32 payloads.
Only what the tests need is encoded and decoded: varint, fixed64, double and nested message
fields, no protobuf library.
"""
import fcntl
import mmap
import os
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


# ---- shared memory (proto/ring.h) ----

RING_MAGIC = 0x47525350
RING_HEAD = 4096


class Region:
    """This peer's region of shared memory, laid out as proto/ring.h says: a memfd named
    pstrain-ring, a header page (magic, layout 1, data size, token; at byte 64 how far this
    end has read the other's region), then the data. seal=False leaves it unsealed (a ps must
    refuse it: it could shrink under the reader)."""

    def __init__(self, size=4 << 20, seal=True, name="pstrain-ring"):
        self.size = size
        self.fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(self.fd, RING_HEAD + size)
        self.m = mmap.mmap(self.fd, RING_HEAD + size)
        self.token = os.urandom(16)
        self.m[0:32] = struct.pack("<IIQ", RING_MAGIC, 1, size) + self.token
        if seal:
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS,
                        fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        self.head = 0

    def offer(self, fd=None, token=None, size=None):
        """Hello.ring, as given or with one part changed (a lie)."""
        return (vfield(1, os.getpid()) + vfield(2, self.fd if fd is None else fd) +
                field(3, 2, varint(16) + (token or self.token)) + vfield(4, size or self.size))

    def put(self, data):
        """The position data is put at (a new lap when it would wrap)."""
        pos = self.head
        if pos % self.size + len(data) > self.size:
            pos = (pos // self.size + 1) * self.size
        off = RING_HEAD + pos % self.size
        self.m[off:off + len(data)] = data
        self.head = pos + len(data)
        return pos

    def set_read(self, n):
        """Says (in this region's header) that the other's region is read up to n."""
        self.m[64:72] = struct.pack("<Q", n)


class TheirRegion:
    """The ps's region for this connection (Welcome.ring), mapped read-only."""

    def __init__(self, offer):
        o = decode(offer)
        pid, fd, token, self.size = first(o, 1), first(o, 2), first(o, 3, b""), first(o, 4)
        f = os.open("/proc/%d/fd/%d" % (pid, fd), os.O_RDONLY)
        self.m = mmap.mmap(f, RING_HEAD + self.size, prot=mmap.PROT_READ)
        os.close(f)
        assert self.m[16:32] == token, "the ps's region is not the one offered"

    def get(self, pos, n):
        off = RING_HEAD + pos % self.size
        return self.m[off:off + n]


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
        self.region = None     # this peer's Region, once offered
        self.theirs = None     # the ps's TheirRegion, once mapped
        self.ring_frames = 0   # frames read whose payload came through the ps's region
        self.honest_reads = True  # say in our header what we read of theirs

    def send(self, header, payload=b""):
        self.s.sendall(frame(header, payload))

    def send_ring(self, header, payload, pos=None):
        """A frame whose payload goes through this peer's region (the ring flag, Header
        field 24 its position): put there, or only said to be at pos (a lie)."""
        if pos is None:
            pos = self.region.put(payload)
        header += vfield(24, pos)
        self.s.sendall(b"PSTR" + struct.pack("<HHII", 1, 1, len(header), len(payload)) + header)

    def read_frame(self):
        """(type, header fields, payload) of the next frame; None when the ps closed. A
        payload in the ps's region is read from there (and said read, unless
        honest_reads is off)."""
        while True:
            if len(self.buf) >= 16:
                flags, hlen, plen = struct.unpack("<HII", self.buf[6:16])
                on_stream = 0 if flags & 1 else plen
                if len(self.buf) >= 16 + hlen + on_stream:
                    h = decode(self.buf[16:16 + hlen])
                    payload = self.buf[16 + hlen:16 + hlen + on_stream]
                    self.buf = self.buf[16 + hlen + on_stream:]
                    if flags & 1:
                        pos = first(h, 24)
                        payload = self.theirs.get(pos, plen)
                        self.ring_frames += 1
                        if self.honest_reads:
                            self.region.set_read(pos + plen)
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

    def hello(self, name="peer", index=-1, train=0, test=0, classes=0, encodings=0, ring=None):
        """encodings: the bits 1 << encoding of the tensor encodings the peer claims to know
        (issue 27; 0, as a worker from before them, says nothing). ring: Hello.ring's bytes
        (Region.offer); the WELCOME then says whether the ps took it (welcome["ring_taken"])
        and its own region's offer (welcome["ring"])."""
        body = field(1, 2, varint(len(name)) + name.encode()) + vfield(3, zigzag(index))
        if train or test:
            body += vfield(5, train) + vfield(6, test) + vfield(7, classes)
        if encodings:
            body += vfield(10, encodings)
        if ring is not None:
            body += msgfield(12, ring)
        self.send(vfield(1, MSG["HELLO"]) + msgfield(10, body))
        f = self.read_until(MSG["WELCOME"])
        if f is None or f[0] != MSG["WELCOME"]:
            return None
        w = decode(first(f[1], 11, b""))
        self.welcome = dict(index=first(w, 1), world=first(w, 2), n_params=first(w, 6),
                            epochs=first(w, 7), batch=first(w, 8), chunk=first(w, 10),
                            start_step=first(w, 13), push_encoding=first(w, 25),
                            pull_encoding=first(w, 26),
                            topk_momentum=struct.unpack("<d", first(w, 30, bytes(8)))[0],
                            ring_taken=first(w, 33), ring=first(w, 34, None))
        n, chunk = self.welcome["n_params"], self.welcome["chunk"]
        if first(w, 24):  # the chunks follow the layers (issue 26)
            self.starts = layer_chunks(first(w, 4, b"").decode(), n, chunk)
        else:
            self.starts = list(range(0, n, chunk)) + [n]
        return self.welcome

    def map_theirs(self):
        """Maps the ps's region (Welcome.ring): its replies may come through it once a PULL
        says so (pull(..., ring_mapped=True))."""
        self.theirs = TheirRegion(self.welcome["ring"])

    def pull(self, version, last=False, ring_mapped=False):
        """Asks for the weights of `version` (sync: the next one) and reads the whole reply;
        returns the version it carried, or None when the ps closed."""
        self.send(vfield(1, MSG["PULL"]) + vfield(2, version) + (vfield(5, 1) if last else b"") +
                  (vfield(25, 1) if ring_mapped else b""))
        while True:
            f = self.read_frame()
            if f is None:
                return None
            if f[0] == MSG["WEIGHTS"] and first(f[1], 5):
                return first(f[1], 2)
            if f[0] in (MSG["ERROR"], MSG["SHUTDOWN"]):
                return None

    def push(self, version, value, value_bytes=None, ring=False):
        """A whole gradient of `value` everywhere, computed on `version`, chunk by chunk.
        value_bytes: the payload of one value as given (e.g. an fp16 encoding's 2 bytes);
        default: float32 `value`. ring: the payloads through this peer's region."""
        n = self.welcome["n_params"]
        one = value_bytes if value_bytes is not None else struct.pack("<f", value)
        for off, end in zip(self.starts, self.starts[1:]):
            count = end - off
            last = end == n
            h = vfield(1, MSG["PUSH"]) + vfield(2, version) + vfield(3, off) + vfield(4, count)
            h += vfield(5, 1) if last else b""
            if ring:
                self.send_ring(h, one * count)
            else:
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

    def pull_payloads(self, version, ring_mapped=False):
        """Like pull, but returns (version, [(offset, count, payload), ...]) of the reply."""
        self.send(vfield(1, MSG["PULL"]) + vfield(2, version) + (vfield(25, 1) if ring_mapped else b""))
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
