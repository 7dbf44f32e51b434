#!/usr/bin/env bash
# Issue 27, point 2: gradients and weights in fp16 or bf16 on the wire, negotiated per job.
#  1. bad encodings: pstrain local and pstrain-ps stop with one line and exit 2;
#  2. a Python peer against a ps with --push-compress fp16 --pull-compress bf16: a HELLO that
#     names no encodings (a worker from before them) is refused; one that knows them gets a
#     WELCOME naming them, and weights of 2 bytes a value, all finite and equal to the ps's
#     initial weights rounded to bf16; an fp16 push of NaNs or infinities is rejected (the
#     version stays), one of finite values is applied (the version moves); a float32 push
#     (4 bytes a value) closes the connection;
#  3. sync mlp jobs (2 workers): fp16 push and pull are bit-identical run to run (and with the
#     ps's I/O threads, over TLS, layer by layer), train as
#     well as float32 (test accuracy within 0.02), and move what the encodings say per step:
#     2 workers x parameters x (push bytes + pull bytes), within 3% (the summary's
#     wire_bytes_per_step, with shm_bytes_per_step: the workers are on the ps's host); bf16 pushes with float32 pulls too; and two ps shards as well;
#  4. delta pulls (int8 changes from what each worker holds): the same, the workers ending
#     with the ps's weights, over 2 shards with dense evaluations, and after a kill -9.
source "$(dirname "$0")/lib.sh"
PEER_DIR="$RUNFILES/tests"
MLP_PARAMS=235146

# ---- 1. bad encodings ----
rc=0
"$LAUNCHER_BIN" local --push-compress fp8 >"$OUT/bad-local.log" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "pstrain local --push-compress fp8: exit $rc, not 2"
[ "$(wc -l <"$OUT/bad-local.log")" -eq 1 ] || fail "pstrain local --push-compress fp8: not one line"
rc=0
"$PS_BIN" --workers 1 --listen "127.0.0.1:$(free_port)" --pull-compress int4 \
  >"$OUT/bad-ps.log" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "pstrain-ps --pull-compress int4: exit $rc, not 2"
! grep -q "listening on" "$OUT/bad-ps.log" || fail "pstrain-ps --pull-compress int4: it listened"
pass "unknown encodings: one line, exit 2"

# ---- 2. the negotiation and the ps's checks, from a Python peer ----
port=$(free_port)
start_ps ps-peer --listen "127.0.0.1:$port" --workers 1 --model mlp --epochs 1 --seed 5 \
  --push-compress fp16 --pull-compress bf16 --worker-timeout 30 --checkpoint-dir "$OUT/ckpt0" \
  --checkpoint-every 0 --checkpoint-seconds 0
ps_pid=$LAST_PID
wait_for "$OUT/ps-peer.log" "listening on" 10
cat >"$OUT/peer_check.py" <<'PY'
import math, struct, sys
from peer import Peer, MSG, vfield, first, decode

port = int(sys.argv[1])

def version():
    p = Peer(port)
    p.simple("STATUS_REQ")
    f = p.read_until(MSG["STATUS"])
    p.close()
    return first(decode(first(f[1], 13, b"")), 1)

old = Peer(port)
assert old.hello("old") is None, "a worker that names no encodings was welcomed"
assert old.read_frame() is None, "the ps kept the refused connection open"

p = Peer(port)
w = p.hello("new", encodings=7)
assert w is not None, "a worker that knows the encodings was refused"
assert (w["push_encoding"], w["pull_encoding"]) == (1, 2), w
v, chunks = p.pull_payloads(0)
assert v == 0, v
n = 0
for off, count, payload in chunks:
    assert len(payload) == 2 * count, (off, count, len(payload))
    n += count
    vals = [struct.unpack("<f", b"\0\0" + payload[2 * i:2 * i + 2])[0] for i in range(count)]
    assert all(math.isfinite(x) for x in vals), "a non-finite weight"
    if off == 0:
        first_vals = vals
assert n == w["n_params"], (n, w["n_params"])
assert any(x != 0 for x in first_vals), "all-zero weights"
# Frames on one connection are handled in order: a pull of version 0 after each push says
# whether that push made a step (the reply would carry version 1).
for bad in (b"\x00\x7c", b"\x00\xfe"):  # fp16 infinity, fp16 NaN
    p.push(0, 0, value_bytes=bad)
    assert p.pull(0) == 0, "a push of non-finite fp16 values was applied"
p.push(0, 0, value_bytes=struct.pack("<e", 0.001))
assert p.pull(1) == 1, "a finite fp16 push was not applied"
assert version() == 1
# Float32 values where the job says fp16: a malformed frame, and the connection closes.
p.closed_by(lambda: p.push(1, 0.001), "a float32 push")
print("ok")
PY
PYTHONPATH="$PEER_DIR" /usr/bin/python3 "$OUT/peer_check.py" "$port" >"$OUT/peer_check.log" 2>&1 ||
  { cat "$OUT/peer_check.log"; fail "the peer's checks failed"; }
kill "$ps_pid" 2>/dev/null || true
wait "$ps_pid" 2>/dev/null || true
pass "negotiation: old workers refused, encoded weights, non-finite fp16 pushes rejected, float32 pushes close"

# Top-k: pairs are checked like any push (an index out of range, or out of order, closes the
# connection; a NaN value is rejected), and good pairs make a step.
port=$(free_port)
start_ps ps-topk --listen "127.0.0.1:$port" --workers 1 --model mlp --epochs 1 --seed 5 \
  --push-compress topk:0.5 --worker-timeout 30
ps_pid=$LAST_PID
wait_for "$OUT/ps-topk.log" "listening on" 10
cat >"$OUT/peer_topk.py" <<'PY'
import math, struct, sys
from peer import Peer, MSG

port = int(sys.argv[1])
p = Peer(port)
assert p.hello("fp16-only", encodings=7) is None, "a worker without top-k was welcomed"
p = Peer(port)
w = p.hello("topk", encodings=15)
assert w is not None and w["push_encoding"] == 3, w
assert p.pull(0) == 0
pairs = lambda *iv: b"".join(struct.pack("<If", i, v) for i, v in iv)
p.push_raw(0, lambda off, count: pairs((0, float("nan"))))
assert p.pull(0) == 0, "a top-k push with a NaN was applied"
p.push_raw(0, lambda off, count: pairs((0, 0.001), (count - 1, -0.001)) if count >= 4 else pairs((0, 0.001)))
assert p.pull(1) == 1, "a good top-k push was not applied"
p.closed_by(lambda: p.push_raw(1, lambda off, count: pairs((count, 0.001))), "an out-of-range index")
print("ok")
PY
PYTHONPATH="$PEER_DIR" /usr/bin/python3 "$OUT/peer_topk.py" "$port" >"$OUT/peer_topk.log" 2>&1 ||
  { cat "$OUT/peer_topk.log"; fail "the top-k peer's checks failed"; }
kill "$ps_pid" 2>/dev/null || true
wait "$ps_pid" 2>/dev/null || true
pass "top-k: a worker without it refused, NaN pairs rejected, good pairs applied, an index out of range closes"

# Momentum correction (DGC): with top-k pushes and --optimizer momentum the WELCOME gives the
# workers the momentum and the ps steps with none: two equal pushes move a weight by equal
# steps. With --topk-momentum-correction=false the ps keeps it: the second step is 1.9 times
# the first (momentum 0.9).
cat >"$OUT/peer_mom.py" <<'PY'
import struct, sys
from peer import Peer

port, want_m, want_ratio = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
p = Peer(port)
w = p.hello("topk-momentum", encodings=15)
assert w is not None and abs(w["topk_momentum"] - want_m) < 1e-6, w
pairs = lambda *iv: b"".join(struct.pack("<If", i, v) for i, v in iv)
def first_weight(version):
    v, chunks = p.pull_payloads(version)
    assert v == version, (v, version)
    return struct.unpack_from("<f", chunks[0][2], 0)[0]
w0 = first_weight(0)
p.push_raw(0, lambda off, count: pairs((0, 0.25)))
w1 = first_weight(1)
p.push_raw(1, lambda off, count: pairs((0, 0.25)))
w2 = first_weight(2)
ratio = (w1 - w2) / (w0 - w1)
print(f"steps {w0 - w1:.6g} then {w1 - w2:.6g}: ratio {ratio:.4f} (want {want_ratio})")
assert w0 - w1 > 0 and abs(ratio - want_ratio) < 1e-3, ratio
print("ok")
PY
for mc in "true 0.9 1.0" "false 0 1.9"; do
  read -r on m ratio <<<"$mc"
  port=$(free_port)
  start_ps "ps-mom-$on" --listen "127.0.0.1:$port" --workers 1 --model mlp --epochs 1 --seed 5 \
    --push-compress topk:0.5 --optimizer momentum --momentum 0.9 --lr 0.5 \
    --topk-momentum-correction="$on" --worker-timeout 30
  ps_pid=$LAST_PID
  wait_for "$OUT/ps-mom-$on.log" "listening on" 10
  PYTHONPATH="$PEER_DIR" /usr/bin/python3 "$OUT/peer_mom.py" "$port" "$m" "$ratio" >"$OUT/peer_mom-$on.log" 2>&1 ||
    { cat "$OUT/peer_mom-$on.log"; fail "momentum correction $on: the peer's checks failed"; }
  kill "$ps_pid" 2>/dev/null || true
  wait "$ps_pid" 2>/dev/null || true
done
pass "top-k with momentum: the workers are told it and the ps steps without it (and with it when the correction is off)"

# ---- 3. whole jobs ----
# bytes_per_step NAME PUSH_BYTES PULL_BYTES: the summary's figure against 2 workers x params x
# (push + pull bytes), within 3% (frame headers, reports, the first and final pulls).
bytes_per_step() {
  /usr/bin/python3 - "$OUT/$1.json" "$2" "$3" "$MLP_PARAMS" <<'PY' || fail "$1: wire bytes per step"
import json, sys
s = json.load(open(sys.argv[1]))
want = 2 * int(sys.argv[4]) * (int(sys.argv[2]) + int(sys.argv[3]))
# On the ps's port, and through shared memory (the workers are on the ps's host).
got = s["wire_bytes_per_step"] + s["shm_bytes_per_step"]
print(f"{sys.argv[1]}: {got:.0f} bytes per step ({s['shm_bytes_per_step']:.0f} through shared memory), {s['wire_bytes_per_sample']:.1f} per sample "
      f"(encodings {s['push_encoding']}/{s['pull_encoding']}; expected {want})")
assert 1.0 <= got / want <= 1.03, (got, want)
assert s["wire_bytes_per_sample"] * s["samples"] > 0.99 * s["wire_bytes_per_step"] * s["updates"]
PY
}
accuracy() { json_field "$OUT/$1.json" test_accuracy; }

fp32=$(local_checksum fp32)
bytes_per_step fp32 4 4
a=$(local_checksum fp16-a --push-compress fp16 --pull-compress fp16)
b=$(local_checksum fp16-b --push-compress fp16 --pull-compress fp16)
[ "$a" = "$b" ] || fail "fp16 runs differ: $a vs $b"
[ "$a" != "$fp32" ] || fail "fp16 gave float32's weights: nothing was rounded"
bytes_per_step fp16-a 2 2
/usr/bin/python3 -c 'import sys; sys.exit(0 if abs(float(sys.argv[1]) - float(sys.argv[2])) <= 0.02 else 1)' \
  "$(accuracy fp16-a)" "$(accuracy fp32)" ||
  fail "fp16 accuracy $(accuracy fp16-a) against float32's $(accuracy fp32)"
pass "fp16 push and pull: bit-identical run to run ($a), half the bytes, accuracy $(accuracy fp16-a) (float32 $(accuracy fp32))"

# The other ways bytes move give the same bits: the ps's I/O threads (payloads of 16 KiB and
# more read and written off the loop: the first layer's chunk of 200,960 values is 393 KiB in fp16,
# over --io-offload-kib's 256), TLS, and pushes last chunk first with pulls layer by layer.
c=$(local_checksum fp16-io --push-compress fp16 --pull-compress fp16 --ps-threads 3 --chunk-kib 4096)
[ "$c" = "$a" ] || fail "fp16 with the ps's I/O threads: $c, not $a"
c=$(local_checksum fp16-tls --push-compress fp16 --pull-compress fp16 --tls)
[ "$c" = "$a" ] || fail "fp16 over TLS: $c, not $a"
c=$(local_checksum fp16-layers --push-compress fp16 --pull-compress fp16 --push-by-layer --pull-by-layer)
[ "$c" = "$a" ] || fail "fp16 layer by layer: $c, not $a"
pass "fp16: the same bits with the ps's I/O threads, over TLS, and layer by layer"

local_checksum bf16 --push-compress bf16 >/dev/null
bytes_per_step bf16 2 4
local_checksum fp16-shards --push-compress fp16 --pull-compress fp16 --ps-shards 2 >/dev/null
/usr/bin/python3 -c 'import sys; sys.exit(0 if abs(float(sys.argv[1]) - float(sys.argv[2])) <= 0.02 else 1)' \
  "$(accuracy fp16-shards)" "$(accuracy fp32)" || fail "fp16 over 2 shards: accuracy $(accuracy fp16-shards)"
pass "bf16 push with float32 pull: 3/4 of the bytes; fp16 over 2 ps shards trains"

# Top-k pushes with error feedback, fp16 pulls: bit-identical run to run; a push carries
# about 5% of the values, 8 bytes each (the chunks' k rounded, at least 1 each).
a=$(local_checksum topk-a --push-compress topk:0.05 --pull-compress fp16)
b=$(local_checksum topk-b --push-compress topk:0.05 --pull-compress fp16)
[ "$a" = "$b" ] || fail "top-k runs differ: $a vs $b"
/usr/bin/python3 - "$OUT/topk-a.json" "$MLP_PARAMS" <<'PY' || fail "top-k: bytes or accuracy"
import json, sys
s = json.load(open(sys.argv[1]))
n = int(sys.argv[2])
step = s["wire_bytes_per_step"] + s["shm_bytes_per_step"]  # the port's and shared memory's
push = step - 2 * n * 2  # less the fp16 pulls
print(f"top-k 0.05: {step:.0f} bytes per step, pushes {push:.0f}; "
      f"accuracy {s['test_accuracy']}")
assert s["push_encoding"] == "topk:0.05", s["push_encoding"]
assert 0.05 * n * 8 * 2 * 0.98 <= push <= 0.05 * n * 8 * 2 * 1.1, push
assert s["test_accuracy"] > 0.7, s["test_accuracy"]  # 117 steps; float32 gets 0.84
assert s["rejected"] == 0, s["rejected"]
PY
pass "top-k 0.05 with fp16 pulls: bit-identical run to run ($a), the pairs' bytes, trains"

# int8 pushes (a scale and a byte per value, error feedback) with fp16 pulls: bit-identical
# run to run, n + 4 bytes per chunk pushed, and training as float32 does (within 0.02).
a=$(local_checksum int8-a --push-compress int8 --pull-compress fp16)
b=$(local_checksum int8-b --push-compress int8 --pull-compress fp16)
[ "$a" = "$b" ] || fail "int8 runs differ: $a vs $b"
/usr/bin/python3 - "$OUT/int8-a.json" "$OUT/fp32.json" "$MLP_PARAMS" <<'PY' || fail "int8: bytes or accuracy"
import json, sys
s, f = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
n = int(sys.argv[3])
step = s["wire_bytes_per_step"] + s["shm_bytes_per_step"]  # the port's and shared memory's
push = step - 2 * n * 2  # less the fp16 pulls
print(f"int8: {step:.0f} bytes per step, pushes {push:.0f}; accuracy "
      f"{s['test_accuracy']} (float32 {f['test_accuracy']})")
assert s["push_encoding"] == "int8", s["push_encoding"]
assert 2 * n <= push <= 2 * n * 1.06, push  # a byte a value, the scales and frame headers
assert abs(s["test_accuracy"] - f["test_accuracy"]) <= 0.02
assert s["rejected"] == 0, s["rejected"]
PY
pass "int8 pushes with fp16 pulls: bit-identical run to run ($a), a byte a value, accuracy as float32's"

# Top-k's warm-up (--topk-warmup 1: over the epoch's 117 steps the share sent falls from 0.25
# to 0.05, by the version alone): bit-identical run to run, and the pushes carry the
# schedule's mean share (about 0.124, not 0.05); without top-k pushes the ps refuses it.
a=$(local_checksum topkwu-a --push-compress topk:0.05 --pull-compress fp16 --topk-warmup 1)
b=$(local_checksum topkwu-b --push-compress topk:0.05 --pull-compress fp16 --topk-warmup 1)
[ "$a" = "$b" ] || fail "top-k runs with a warm-up differ: $a vs $b"
/usr/bin/python3 - "$OUT/topkwu-a.json" "$MLP_PARAMS" <<'PY' || fail "top-k warm-up: bytes or accuracy"
import json, sys
s = json.load(open(sys.argv[1]))
n = int(sys.argv[2])
steps = 60000 // 512
mean = sum(0.25 * (0.05 / 0.25) ** (v / steps) for v in range(steps)) / steps
step = s["wire_bytes_per_step"] + s["shm_bytes_per_step"]  # the port's and shared memory's
push = step - 2 * n * 2  # less the fp16 pulls
print(f"top-k 0.05 with a warm-up of 1 epoch: pushes {push:.0f} bytes per step, the schedule's "
      f"mean share {mean:.4f} ({mean * n * 16:.0f} bytes); accuracy {s['test_accuracy']}")
assert s["topk_warmup_epochs"] == 1, s["topk_warmup_epochs"]
assert mean * n * 16 * 0.97 <= push <= mean * n * 16 * 1.1, push
assert s["test_accuracy"] > 0.7, s["test_accuracy"]
assert s["rejected"] == 0, s["rejected"]
PY
ps_refuses "--workers 1 --topk-warmup 1" "--workers 1 --push-compress topk:0.1 --topk-warmup -1" \
  "--workers 1 --push-compress topk:0.1 --topk-warmup x"
pass "top-k warm-up: bit-identical run to run ($a), the schedule's bytes; bad values refused"

# Top-k with a momentum optimizer: the workers keep the momentum (velocities, masked where
# sent); bit-identical run to run, and it trains.
a=$(local_checksum topkm-a --push-compress topk:0.05 --pull-compress fp16 --optimizer momentum --lr 0.05)
b=$(local_checksum topkm-b --push-compress topk:0.05 --pull-compress fp16 --optimizer momentum --lr 0.05)
[ "$a" = "$b" ] || fail "top-k runs with momentum correction differ: $a vs $b"
/usr/bin/python3 - "$OUT/topkm-a.json" <<'PY' || fail "top-k with momentum correction: summary or accuracy"
import json, sys
s = json.load(open(sys.argv[1]))
print(f"top-k 0.05 with momentum kept by the workers: accuracy {s['test_accuracy']}")
assert abs(s["topk_momentum"] - 0.9) < 1e-6, s["topk_momentum"]
assert s["test_accuracy"] > 0.7, s["test_accuracy"]
assert s["rejected"] == 0, s["rejected"]
PY
pass "top-k with momentum correction: bit-identical run to run ($a), trains"

# Delta pulls: each reply after a worker's first is, chunk by chunk, an int8 change from the
# weights that worker holds (the ps keeps a copy of them per connection). Bit-identical run
# to run; the pulls take a byte a value (plus the scales, and the float32 first, evaluated
# and final replies); training as float32's (within 0.02); and every worker ends with the
# ps's own weights (the final reply is float32): its final checksum is the ps's, and the ps
# saw no evaluation of other weights. Over 2 shards with dense evaluations, whose replies
# are float32 from every shard: the workers' evaluations agree on one model.
a=$(local_checksum delta-a --pull-compress delta)
b=$(local_checksum delta-b --pull-compress delta)
[ "$a" = "$b" ] || fail "delta runs differ: $a vs $b"
[ "$a" != "$fp32" ] || fail "delta gave float32's weights: nothing was rounded"
/usr/bin/python3 - "$OUT/delta-a.json" "$OUT/fp32.json" "$MLP_PARAMS" <<'PY' || fail "delta: bytes or accuracy"
import json, sys
s, f = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
n = int(sys.argv[3])
step = s["wire_bytes_per_step"] + s["shm_bytes_per_step"]  # the port's and shared memory's
pull = step - 2 * n * 4  # less the float32 pushes
print(f"delta: {step:.0f} bytes per step, pulls {pull:.0f}; accuracy "
      f"{s['test_accuracy']} (float32 {f['test_accuracy']})")
assert s["pull_encoding"] == "delta", s["pull_encoding"]
# A byte a value; three float32 replies per worker over 117 steps add about 0.2 n.
assert 2 * n <= pull <= 2 * n * 1.2, pull
assert abs(s["test_accuracy"] - f["test_accuracy"]) <= 0.02
assert s["rejected"] == 0, s["rejected"]
PY
for w in "$OUT"/delta-a/worker*.log; do
  grep -q "final weights: .*checksum $a" "$w" || fail "delta: $(basename "$w") did not end with the ps's weights $a"
done
! grep -q "but this ps holds weights" "$OUT/delta-a/ps.log" || fail "delta: the workers evaluated other weights than the ps's"
# The same bits over TLS, and with pushes and pulls layer by layer (each change is added as
# its chunk arrives, while the step computes on the layers before it).
c=$(local_checksum delta-tls --pull-compress delta --tls)
[ "$c" = "$a" ] || fail "delta over TLS: $c, not $a"
c=$(local_checksum delta-layers --pull-compress delta --push-by-layer --pull-by-layer)
[ "$c" = "$a" ] || fail "delta layer by layer: $c, not $a"
local_checksum delta-shards --pull-compress delta --ps-shards 2 --eval-every 10 >/dev/null
! grep -q "another worker's had" "$OUT"/delta-shards/ps*.log || fail "delta over 2 shards: evaluations of different weights"
pass "delta pulls: bit-identical run to run ($a), also over TLS and layer by layer; a byte a value, accuracy as float32's, the ps's final weights; 2 shards with dense evaluations"

# Sparse delta pulls: with top-k pushes and momentum correction the ps steps with plain SGD
# and no weight decay, so a step changes only values some worker pushed, and each reply's
# chunks are those values as exact pairs (Header.sparse): the workers hold the ps's weights
# bit for bit, so the job ends with the weights of the same job with float32 pulls, moving
# far fewer bytes than int8's byte a value. Layer by layer too.
a=$(local_checksum sparse-a --push-compress topk:0.01 --optimizer momentum --lr 0.05 --pull-compress delta)
f=$(local_checksum sparse-f32 --push-compress topk:0.01 --optimizer momentum --lr 0.05)
[ "$a" = "$f" ] || fail "sparse delta pulls: $a, not the float32 pulls' $f"
c=$(local_checksum sparse-layers --push-compress topk:0.01 --optimizer momentum --lr 0.05 --pull-compress delta \
  --push-by-layer --pull-by-layer)
[ "$c" = "$a" ] || fail "sparse delta pulls layer by layer: $c, not $a"
/usr/bin/python3 - "$OUT/sparse-a.json" "$OUT/sparse-f32.json" "$MLP_PARAMS" <<'PY' || fail "sparse delta pulls: bytes"
import json, sys
s, f = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
n = int(sys.argv[3])
# The port's and shared memory's bytes.
push = f["wire_bytes_per_step"] + f["shm_bytes_per_step"] - 2 * n * 4  # as the float32-pull job's, less its pulls
pull = s["wire_bytes_per_step"] + s["shm_bytes_per_step"] - push
print(f"sparse delta: pulls {pull:.0f} bytes per step (int8 would take {2 * n}); accuracy "
      f"{s['test_accuracy']}")
# At most 2 workers x 1% of the values change a step, 8 bytes each (0.16 n), and the three
# float32 replies per worker over 117 steps add about 0.2 n.
assert pull <= 2 * n * 0.3, pull
assert s["rejected"] == 0, s["rejected"]
PY
for w in "$OUT"/sparse-a/worker*.log; do
  grep -q "final weights: .*checksum $a" "$w" || fail "sparse: $(basename "$w") did not end with the ps's weights $a"
done
pass "sparse delta pulls: the weights of float32 pulls ($a), also layer by layer; pulls under 0.3 bytes a value"

# A worker killed mid-run with delta pulls is started again: its new connection's first reply
# is float32 (the ps's copy of what the old one held is gone with it), and the job ends with
# every worker holding the ps's weights.
"$LAUNCHER_BIN" local --workers 2 --epochs 2 --batch-size 32 --delay-worker 0:3 --pull-compress delta \
  --run-dir "$OUT/delta-kill" --summary-json "$OUT/delta-kill.json" >"$OUT/delta-kill.out" 2>&1 &
launcher=$!
PIDS+=("$launcher")
for _ in $(seq 400); do grep -q '"train"' "$OUT/delta-kill/metrics.jsonl" 2>/dev/null && break; sleep 0.05; done
pkill -9 -P "$launcher" -f -- "--index=1" || fail "delta: no worker 1 to kill"
rc=0; wait_pid "$launcher" 180 || rc=$?
[ $rc -eq 0 ] && grep -q "worker 1 .* rejoined" "$OUT/delta-kill/ps.log" || fail "delta: the killed worker did not rejoin: rc $rc"
k=$(json_field "$OUT/delta-kill.json" weights_checksum)
for w in "$OUT"/delta-kill/worker*.log; do
  grep -q "final weights: .*checksum $k" "$w" || fail "delta: after the kill, $(basename "$w") did not end with the ps's weights $k"
done
at_least "$(accuracy delta-kill)" 0.8 || fail "delta: accuracy $(accuracy delta-kill) after a worker was killed"
pass "delta pulls: a killed worker rejoins on float32 weights and the job ends with the ps's ($k)"

# compare sweeps encodings (issue 27, point 3): one row per mode and encoding, each with its
# wire bytes; bad entries are one line and exit 2.
"$LAUNCHER_BIN" compare --modes sync --encodings none,fp16/fp16 --workers 2 --epochs 1 \
  --batch-size 1024 --targets 0.7 --out "$OUT/compare" >"$OUT/compare.log" 2>&1 ||
  { cat "$OUT/compare.log"; fail "compare --encodings failed"; }
/usr/bin/python3 - "$OUT/compare/summary.md" <<'PY' || fail "compare --encodings: its table"
import sys
rows = {}
head = None
for line in open(sys.argv[1]):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if cells and cells[0] == "mode":
        head = cells
    elif head and len(cells) == len(head) and not cells[0].startswith("---"):
        rows[cells[0]] = dict(zip(head, cells))
assert set(rows) == {"sync none", "sync fp16/fp16"}, rows.keys()
mb = {k: float(v["wire MB per update"]) for k, v in rows.items()}
assert 0.49 < mb["sync fp16/fp16"] / mb["sync none"] < 0.51, mb
PY
for bad in "--encodings fp8" "--encodings fp16/topk:0.1" "--links 100"; do
  rc=0
  # shellcheck disable=SC2086
  "$LAUNCHER_BIN" compare --modes sync $bad --out "$OUT/compare-bad" >"$OUT/compare-bad.log" 2>&1 || rc=$?
  [ "$rc" -eq 2 ] || fail "compare $bad: exit $rc, not 2"
  [ "$(wc -l <"$OUT/compare-bad.log")" -eq 1 ] || fail "compare $bad: not one line"
done
pass "compare --encodings: a row per encoding with its bytes (fp16 half of float32's); bad entries exit 2"
echo "12 passed, 0 failed"
