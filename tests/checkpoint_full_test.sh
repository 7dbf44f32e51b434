#!/usr/bin/env bash
# Issue 43, item A: a final checkpoint that was not written is a failure, not a success.
# The checkpoint directory is a small tmpfs (root, outside the sandbox: tag "local"):
#  1. Room for one checkpoint (an MLP with SGD, about 0.9 MiB each, in 1.5 MiB): the first
#     periodic one is written, every later one fails and training goes on, then the final
#     one fails too. The ps exits PST_EXIT_CHECKPOINT (4); its summary says failed, not
#     finished, checkpoint_final_failed, and names as its checkpoint a file that exists.
#  2. No room at all (the tmpfs filled first), through `pstrain local`: it exits non-zero,
#     reports the ps's exit status 4, the directory holds no checkpoint, and the summary
#     names none.
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: mounting a tmpfs needs root"; exit 0; }

MNT=$(mktemp -d /tmp/pstrain-ckfull.XXXXXX)
mount -t tmpfs -o size=1536k tmpfs "$MNT" || fail "cannot mount a tmpfs on $MNT"
unmount() {
  cleanup
  umount "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true
  rmdir "$MNT" 2>/dev/null || true
}
trap unmount EXIT

job=(--model mlp --optimizer sgd --lr 0.05 --epochs 1 --batch-size 64 --seed 3)

# names_only_existing SUMMARY: the summary's checkpoint is "" or a file that exists.
names_only_existing() {
  local ck
  ck=$(json_field "$1" checkpoint)
  [ -z "$ck" ] || [ -f "$ck" ] || fail "$(basename "$1") names checkpoint '$ck', which does not exist"
  echo "$ck"
}

# ---- 1. room for the first checkpoint only, the daemons by hand ----
mkdir "$MNT/one"
port=$(free_port)
start_ps ps-one --listen "127.0.0.1:$port" --mode sync --workers 2 "${job[@]}" \
  --checkpoint-dir "$MNT/one" --checkpoint-every 100 --checkpoint-seconds 0 \
  --summary-json "$OUT/one.json"
ps_pid=$LAST_PID
for i in 0 1; do
  start_worker "worker$i-one" --ps "127.0.0.1:$port" --index "$i"
  wpids[$i]=$LAST_PID
done
for i in 0 1; do wait_pid "${wpids[$i]}" 120 || true; done
rc=0
wait_pid "$ps_pid" 60 || rc=$?
[ "$rc" -eq 4 ] || fail "1: the ps exited $rc after its final checkpoint failed, not 4"
[ "$(json_field "$OUT/one.json" checkpoint_final_failed)" = True ] ||
  fail "1: the summary does not say the final checkpoint failed"
[ "$(json_field "$OUT/one.json" failed)" = True ] && [ "$(json_field "$OUT/one.json" finished)" = False ] ||
  fail "1: the summary passes the run off as finished"
ck=$(names_only_existing "$OUT/one.json")
[ -n "$ck" ] || fail "1: the summary names no checkpoint, though the first one was written"
v=$(/usr/bin/python3 -c 'import re,sys; print(int(re.search(r"ckpt-(\d+)", sys.argv[1]).group(1)))' "$ck")
updates=$(json_field "$OUT/one.json" updates)
[ "$v" -gt 0 ] && [ "$v" -lt "$updates" ] ||
  fail "1: the checkpoint named is of version $v, not an earlier one than the run's $updates"
pass "room for one checkpoint: ps exit 4, the summary names the version-$v file that exists"

# ---- 2. no room at all, through pstrain local ----
mkdir "$MNT/none"
dd if=/dev/zero of="$MNT/fill" bs=64k 2>/dev/null || true
rc=0
PSTRAIN_PS_BIN="$PS_BIN" PSTRAIN_WORKER_BIN="$WORKER_BIN" "$LAUNCHER_BIN" local --workers 2 \
  --mode sync "${job[@]}" --checkpoint-dir "$MNT/none" --run-dir "$OUT/none" \
  --summary-json "$OUT/none.json" >"$OUT/none.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "2: pstrain local exited 0 though no checkpoint could be written"
grep -qE 'pstrain-ps[^ ]* exited with status 4' "$OUT/none.out" ||
  fail "2: pstrain local does not report the ps's exit status 4"
[ -f "$OUT/none.json" ] || fail "2: no summary"
ck=$(names_only_existing "$OUT/none.json")
[ -z "$ck" ] || fail "2: the summary names checkpoint $ck"
[ "$(json_field "$OUT/none.json" checkpoint_final_failed)" = True ] ||
  fail "2: the summary does not say the final checkpoint failed"
[ "$(json_field "$OUT/none.json" finished)" = False ] || fail "2: the summary says finished"
n=$(find "$MNT/none" -name 'ckpt-*.safetensors' | wc -l)
[ "$n" -eq 0 ] || fail "2: $n checkpoint files in a directory with no room"
pass "no room: pstrain local exit $rc with the ps's status 4, no checkpoint named"
echo "2 passed, 0 failed"
