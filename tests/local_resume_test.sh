#!/usr/bin/env bash
# Issue 25, point 5: `pstrain local` takes the ps's checkpoint flags and passes them on, so a
# local job stopped with Ctrl-C or killed resumes when the same command runs again. A sync
# job resumed from a checkpoint replays the steps it lost, so each one below must end with
# the weights of the same job run straight through (compared as the summaries' checksums).
#  1. Ctrl-C (SIGINT to the launcher) mid-run: exit 130, the ps saves a checkpoint of the
#     version it stood at; the same command resumes from exactly that version and finishes.
#  2. The same over 2 ps shards: one --checkpoint-dir, each shard its own part inside it.
#     A signal that lands between one shard's step and the other's leaves their newest
#     checkpoints a version apart (seen here, 315 and 316); the launcher then sets aside what
#     not every shard has, and all resume from the newest version they share. The test makes
#     that case every time, with a copy of shard 1's checkpoint named one version on.
#  3. kill -9 of the launcher and every process of the job mid-run (a crash, a reboot): the
#     same command resumes from the newest periodic checkpoint and finishes; while the job
#     ran, a second job given its checkpoint directory was refused in one line, exit 2.
#  4. The same command once more, the job finished: exit 0, nothing trained again, and the
#     launcher says why there is no summary.
# The workers wait 2 x 2 ms per step besides computing (--delay-worker, which changes no bit):
# a job then lasts long enough past step 300 for the signal to land mid-run on any CPU.
# The jobs run under --lr-schedule cosine, whose rate changes at every step with the version:
# a resumed job must pick the schedule up where the checkpoint's version left it.
source "$(dirname "$0")/lib.sh"
export PSTRAIN_PS_BIN="$PS_BIN" PSTRAIN_WORKER_BIN="$WORKER_BIN"
job=(local --workers 2 --mode sync --model mlp --epochs 2 --batch-size 64 --seed 5 --lr-schedule cosine)
paced=(--delay-worker 0:2,1:2 --checkpoint-every 100)

"$LAUNCHER_BIN" "${job[@]}" --run-dir "$OUT/ref" --summary-json "$OUT/ref.json" >"$OUT/ref.out" 2>&1 ||
  fail "the reference job failed: $(tail -n 2 "$OUT/ref.out")"
ref=$(json_field "$OUT/ref.json" weights_checksum)
total=$(json_field "$OUT/ref.json" updates)

# same FILE KEY VALUE: whether a summary's field holds VALUE.
same() { [ "$(json_field "$1" "$2")" = "$3" ]; }

# started NAME ARGS...: the job in the background, its launcher's pid in JOB.
started() {
  local name=$1; shift
  "$LAUNCHER_BIN" "${job[@]}" "${paced[@]}" --run-dir "$OUT/$name" --summary-json "$OUT/$name.json" \
    "$@" >>"$OUT/$name.out" 2>&1 &
  JOB=$!
  PIDS+=("$JOB")
  wait_step "$OUT/$name/metrics.jsonl" 300 60
}

# resumed NAME FROM ARGS...: the same command again finishes, resumed from version FROM (a
# number, or "any" for a periodic checkpoint at or before the one it was stopped at), with
# the straight run's weights.
resumed() {
  local name=$1 from=$2; shift 2
  "$LAUNCHER_BIN" "${job[@]}" "${paced[@]}" --run-dir "$OUT/$name" --summary-json "$OUT/$name.json" \
    "$@" >>"$OUT/$name.out" 2>&1 || fail "$name: started again, the job failed: $(tail -n 2 "$OUT/$name.out")"
  same "$OUT/$name.json" resumed True && same "$OUT/$name.json" finished True ||
    fail "$name: started again, it did not resume and finish: $(cat "$OUT/$name.json")"
  local v
  v=$(json_field "$OUT/$name.json" resumed_from_version)
  if [ "$from" = any ]; then
    [ "$v" -gt 0 ] && [ $((v % 100)) = 0 ] || fail "$name: resumed from version $v, not a periodic checkpoint"
  else
    [ "$v" = "$from" ] || fail "$name: resumed from version $v, not $from where it stopped"
  fi
  same "$OUT/$name.json" updates "$total" || fail "$name: ended at version $(json_field "$OUT/$name.json" updates), not $total"
  same "$OUT/$name.json" weights_checksum "$ref" ||
    fail "$name: weights $(json_field "$OUT/$name.json" weights_checksum) after resuming, $ref straight through"
  RESUMED_FROM=$v
}

# 1. Ctrl-C.
started int --checkpoint-dir "$OUT/ck-int"
kill -INT "$JOB"
rc=0; wait_pid "$JOB" 30 || rc=$?
[ "$rc" = 130 ] || fail "Ctrl-C: the launcher exited $rc, not 130"
same "$OUT/int.json" stopped True || fail "Ctrl-C: the summary does not say stopped: $(cat "$OUT/int.json")"
at=$(json_field "$OUT/int.json" updates)
[ "$at" -lt "$total" ] || fail "Ctrl-C: the job had finished before it (version $at)"
[ -f "$(json_field "$OUT/int.json" checkpoint)" ] || fail "Ctrl-C: no checkpoint of version $at"
resumed int "$at" --checkpoint-dir "$OUT/ck-int"
[ "$(grep -c '"event":"summary"' "$OUT/int/metrics.jsonl")" = 2 ] ||
  fail "Ctrl-C: the metrics file does not hold both parts of the job"
pass "Ctrl-C at version $at: exit 130 with a checkpoint of it; the same command resumed from $at and ended with the straight run's weights ($ref)"

# 2. Ctrl-C over 2 ps shards.
started shards --ps-shards 2 --checkpoint-dir "$OUT/ck-shards"
kill -INT "$JOB"
rc=0; wait_pid "$JOB" 30 || rc=$?
[ "$rc" = 130 ] || fail "Ctrl-C over 2 shards: the launcher exited $rc, not 130"
# Each shard's checkpoint versions, and the newest of each: the versions the two stopped at,
# which the signal may have left a version apart already; when it did not, shard 1's is
# copied one version on. The job must resume from the newest version both shards hold (a
# periodic one when the signal left them apart, as the shard ahead holds no checkpoint of
# the other's version), and set aside every checkpoint newer than that.
versions() {
  ls "$OUT/ck-shards/shard-$1-of-2/"ckpt-*.safetensors 2>/dev/null | sed 's/.*ckpt-0*\([0-9]*\)\.safetensors/\1/' |
    sort -n
}
v0=$(versions 0 | tail -n 1); v1=$(versions 1 | tail -n 1)
[ -n "$v0" ] && [ -n "$v1" ] || fail "a shard saved no checkpoint in its directory ($v0, $v1)"
if [ "$v0" = "$v1" ]; then
  cp "$(printf '%s/ck-shards/shard-1-of-2/ckpt-%012d.safetensors' "$OUT" "$v1")" \
    "$(printf '%s/ck-shards/shard-1-of-2/ckpt-%012d.safetensors' "$OUT" $((v1 + 1)))"
  v1=$((v1 + 1))
fi
at=$(comm -12 <(versions 0 | sort) <(versions 1 | sort) | sort -n | tail -n 1)
[ -n "$at" ] || fail "the shards hold no checkpoint of the same version"
ahead=()
for i in 0 1; do
  for v in $(versions "$i"); do
    [ "$v" -gt "$at" ] && ahead+=("$(printf '%s/ck-shards/shard-%d-of-2/ckpt-%012d.safetensors' "$OUT" "$i" "$v")")
  done
done
resumed shards "$at" --ps-shards 2 --checkpoint-dir "$OUT/ck-shards"
for f in "${ahead[@]}"; do
  [ -f "$f.abandoned" ] && [ ! -e "$f" ] || fail "$(basename "$f"), newer than version $at which both shards hold, was not set aside"
done
pass "Ctrl-C over 2 ps shards: stopped at versions $v0 and $v1, both resumed from $at, the newest they share, each from its own directory, with the straight run's weights"

# 3. kill -9 of everything, with a second job refused meanwhile.
started crash --checkpoint-dir "$OUT/ck-crash"
rc=0
"$LAUNCHER_BIN" "${job[@]}" --run-dir "$OUT/second" --checkpoint-dir "$OUT/ck-crash" \
  >"$OUT/second.out" 2>"$OUT/second.err" || rc=$?
[ "$rc" = 2 ] && [ "$(wc -l <"$OUT/second.err")" = 1 ] && grep -q "in use by another job" "$OUT/second.err" ||
  fail "a second job on the same checkpoint directory: exit $rc, $(cat "$OUT/second.err")"
[ ! -s "$OUT/second.out" ] || fail "the refused job printed: $(cat "$OUT/second.out")"
children=$(pgrep -P "$JOB" | tr '\n' ' ')
[ -n "$children" ] || fail "kill -9: the job has no processes"
# shellcheck disable=SC2086
kill -9 "$JOB" $children
wait "$JOB" 2>/dev/null || true
for p in $children; do
  for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$p" 2>/dev/null && fail "kill -9: process $p lives on"
done
resumed crash any --checkpoint-dir "$OUT/ck-crash"
pass "kill -9 of the launcher and its processes: a second job on the directory was refused ($(cat "$OUT/second.err")); the same command resumed from version $RESUMED_FROM and ended with the straight run's weights"
# 4. Once more, finished.
before=$(grep -c '"train"' "$OUT/int/metrics.jsonl")
rc=0
"$LAUNCHER_BIN" "${job[@]}" "${paced[@]}" --run-dir "$OUT/int" --summary-json "$OUT/again.json" \
  --checkpoint-dir "$OUT/ck-int" >"$OUT/again.out" 2>&1 || rc=$?
[ "$rc" = 0 ] && [ ! -e "$OUT/again.json" ] && [ "$(grep -c '"train"' "$OUT/int/metrics.jsonl")" = "$before" ] ||
  fail "a finished job started again: exit $rc, $(tail -n 2 "$OUT/again.out")"
grep -q "^pstrain: the ps wrote no summary: .*finished job" "$OUT/again.out" ||
  fail "a finished job started again: the launcher did not say why: $(cat "$OUT/again.out")"
pass "the same command after the job finished: exit 0, nothing trained, '$(grep -o 'holds a finished job[^:]*' "$OUT/again.out")'"
echo "4 passed, 0 failed"
