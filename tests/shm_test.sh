#!/usr/bin/env bash
# Issue 41: a worker on the ps's host sends and takes its payloads through shared memory
# (proto/ring.h: a sealed memfd each way, the frames on TCP saying where), and nothing about
# that may be worse than TCP:
#  1. sync, 2 workers: the same final weights with and without it (--shm false), every
#     payload through it (the summary's shm bytes, and almost nothing on the port), none
#     without it; with TLS none;
#  2. kill -9 of a worker mid-run and a replacement on new regions: the clean run's weights;
#  3. a Python peer (tests/peer.py) that speaks it: its pull through the ps's region is
#     the same bytes a TCP peer gets, and its push through its own is applied; offers that
#     are not a sealed pstrain region of the size and token offered (unsealed, another token,
#     a pipe, a size that is not the region's) are not taken, and those peers train over TCP;
#     a peer that says it read more than it did gets its replies over TCP; a frame in shared
#     memory from a peer without a region, or at a position behind what was read or past the
#     region, closes that connection only; the ps serves on.
source "$(dirname "$0")/lib.sh"
PEER_DIR="$RUNFILES/tests"
py() { PYTHONPATH="$PEER_DIR" /usr/bin/python3 "$@"; }
args=(--model mlp --epochs 1 --batch-size 256 --seed 7)
MLP_PARAMS=235146

# ---- 1. the same weights, the bytes through shared memory ----
train sync 2 "$OUT/shm.json" "${args[@]}"
train sync 2 "$OUT/tcp.json" "${args[@]}" --shm false
shm=$(json_field "$OUT/shm.json" weights_checksum)
tcp=$(json_field "$OUT/tcp.json" weights_checksum)
[ "$shm" = "$tcp" ] || fail "checksum $shm through shared memory, $tcp over TCP"
py - "$OUT/shm.json" "$OUT/tcp.json" "$MLP_PARAMS" <<'PY' || fail "the bytes did not go where they should"
import json, sys
shm, tcp, n = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
step = 2 * n * (4 + 4)  # 2 workers, a float32 push and pull each
print(f"shared memory: {shm['shm_bytes_per_step']:.0f} bytes per step there, "
      f"{shm['wire_bytes_per_step']:.0f} on the port; TCP: {tcp['wire_bytes_per_step']:.0f} on the port")
assert shm["shm_bytes_per_step"] >= 0.99 * step, shm
assert shm["wire_bytes_per_step"] < 0.01 * step, shm
assert tcp["shm_bytes_in"] == 0 and tcp["shm_bytes_out"] == 0, tcp
assert tcp["wire_bytes_per_step"] >= step, tcp
PY
"$LAUNCHER_BIN" local --workers 1 --model mlp --epochs 1 --batch-size 256 --tls \
  --run-dir "$OUT/tls" --summary-json "$OUT/tls.json" >"$OUT/tls.out" 2>&1 || fail "the TLS job failed"
[ "$(json_field "$OUT/tls.json" shm_bytes_in)" = 0 ] && [ "$(json_field "$OUT/tls.json" shm_bytes_out)" = 0 ] ||
  fail "TLS: payloads went through shared memory, around TLS"
pass "sync, 2 workers: checksum $shm through shared memory and over TCP; every payload there, none with --shm false or TLS"

# ---- 2. kill -9 of a worker mid-run, and a replacement ----
kill_one_worker k "${args[@]}"
got=$(json_field "$OUT/k.json" weights_checksum)
[ "$got" = "$shm" ] || fail "checksum $got after a worker was killed, $shm in a clean run"
at_least "$(json_field "$OUT/k.json" shm_bytes_in)" 1 || fail "the killed job's payloads did not go through shared memory"
pass "kill -9 of a worker mid-run: replaced on new regions, checksum $got = clean"

# ---- 3. a peer that speaks it, and peers that lie ----
port=$(free_port)
start_ps peer-ps --listen "127.0.0.1:$port" --mode async --workers 8 --worker-timeout 30 \
  --summary-json "$OUT/peer.json" "${args[@]}"
ps_pid=$LAST_PID
wait_for "$OUT/peer-ps.log" "listening on" 20
py - "$port" <<'PY' || fail "the peers' script failed"
import os, struct, sys
from peer import MSG, Peer, Region, vfield

port = int(sys.argv[1])

def chunks_equal(x, y):
    return [(o, c, bytes(p)) for o, c, p in x] == [(o, c, bytes(p)) for o, c, p in y]

a = Peer(port)
assert a.hello("tcp", 0)
b = Peer(port)
b.region = Region()
w = b.hello("ring", 1, ring=b.region.offer())
assert w and w["ring_taken"] == 1 and w["ring"], w
b.map_theirs()
va, ca = a.pull_payloads(0)
vb, cb = b.pull_payloads(0, ring_mapped=True)
assert va == vb and chunks_equal(ca, cb), "the reply through shared memory differs"
assert b.ring_frames == len(cb) == len(ca), (b.ring_frames, len(cb))
# Pushes both ways (async: each applied as it comes), then the newest weights, the same.
a.push(va, 0.001)
b.push(vb, 0.001, ring=True)
for _ in range(200):  # the two connections' frames are read in whichever order they come
    va2, ca2 = a.pull_payloads(0)
    if va2 == va + 2:
        break
vb2, cb2 = b.pull_payloads(0, ring_mapped=True)
assert va2 == vb2 == va + 2 and chunks_equal(ca2, cb2) and not chunks_equal(ca, ca2), (va, va2, vb2)
print(f"a peer through shared memory: {b.ring_frames} reply chunks from the ps's region, the "
      f"same bytes as over TCP; its push through its own applied (version {va} -> {va2})")

# A peer that says it read far more of the ps's region than was put: its replies come on TCP.
frames = b.ring_frames
b.honest_reads = False
b.region.set_read(1 << 40)
va3, ca3 = a.pull_payloads(0)
vb3, cb3 = b.pull_payloads(0, ring_mapped=True)
assert va3 == vb3 and chunks_equal(ca3, cb3) and b.ring_frames == frames, (b.ring_frames, frames)
print("a peer that lied about what it read: the reply came over TCP, the same bytes")

# Offers that are not a sealed pstrain region of that size and token: not taken, TCP.
def refused(name, index, region, offer):
    p = Peer(port)
    p.region = region
    w = p.hello(name, index, ring=offer)
    assert w and not w["ring_taken"] and not w["ring"], (name, w)
    v = p.pull(0)
    assert v is not None, name + ": no pull over TCP after a refused offer"
    return p
unsealed = Region(seal=False)
r = Region()
rd, wr = os.pipe()
kept = [refused("unsealed", 2, unsealed, unsealed.offer()),
        refused("token", 3, r, r.offer(token=os.urandom(16))),
        refused("pipe", 4, r, r.offer(fd=rd)),
        refused("size", 5, r, r.offer(size=r.size * 2))]
print("4 offers refused (unsealed, another token, a pipe, another size): those peers pull over TCP")

# A frame in shared memory from a peer without a region: closed.
g = Peer(port)
assert g.hello("noregion", 6)
# A push's first chunk as the layout has it (the first layer).
count = a.starts[1] - a.starts[0]
h = vfield(1, MSG["PUSH"]) + vfield(2, va2) + vfield(3, 0) + vfield(4, count)
body = b"\0" * (4 * count)
g.closed_by(lambda: g.send_ring(h, body, pos=0), "a ring frame without a region")
# Positions the ps may not read: behind what it read, past the region's end.
for name, pos in (("behind", 0), ("past", b.region.size - 8)):
    p = Peer(port)
    p.region = Region()
    assert p.hello(name, 7, ring=p.region.offer())["ring_taken"]
    p.region.put(body)
    p.send_ring(h, body)  # a good chunk, after an unused one: read up to 2 x its bytes
    p.closed_by(lambda: p.send_ring(h, body, pos=pos), "a ring frame at " + name)
print("ring frames without a region, behind what was read, past the region: each closed")

# The ps serves on: the honest peers still pull.
assert a.pull(0) is not None and b.pull(0, ring_mapped=True) is not None
assert kept[0].pull(0) is not None
print("the ps serves on")
PY
kill -TERM "$ps_pid" 2>/dev/null || true
wait_pid "$ps_pid" 10 || true
if grep -qiE "segmentation|abort|sanitizer|assert" "$OUT/peer-ps.log"; then fail "the ps crashed"; fi
pass "a peer through shared memory: the same bytes; 4 false offers refused, 3 bad frames closed, the ps served on"
echo "3 passed, 0 failed"
