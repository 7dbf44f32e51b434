#!/usr/bin/env bash
# Builds every fuzzer and runs each for a short while from its seed corpus, two at a time:
#   tests/fuzz/run_all.sh BUILD_DIR [SECONDS]    (default 30 s each)
# This is the fuzzing half of `./pstrain test`'s sanitizer pass. It fails when a fuzzer
# finds anything (a crash, a sanitizer report, a leak, a timeout of an input), printing
# the fuzzer's report and keeping the input under BUILD_DIR/findings/. What the fuzzers
# discover along the way goes to a scratch directory, never into tests/fuzz/corpus.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: tests/fuzz/run_all.sh BUILD_DIR [SECONDS]}
secs=${2:-30}
targets=(wire_reader ps_server model_spec config tf_config idx)

"$here/build.sh" "$out" "${targets[@]}"

work=$(mktemp -d /tmp/pstrain-fuzz-run.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out/findings"

# run TARGET: one fuzzer, its log in $work/TARGET.log, its status in $work/TARGET.rc.
run() {
  local t=$1 rc=0
  mkdir -p "$work/$t.corpus"
  # -timeout: an input running 10 s is a hang; -rss_limit_mb: a runaway allocation.
  "$out/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$out/findings/$t-" "$work/$t.corpus" "$here/corpus/$t" \
    >"$work/$t.log" 2>&1 || rc=$?
  echo "$rc" >"$work/$t.rc"
}

start=$SECONDS
for ((i = 0; i < ${#targets[@]}; i += 2)); do
  run "${targets[$i]}" &
  a=$!
  b=""
  if [ $((i + 1)) -lt ${#targets[@]} ]; then
    run "${targets[$((i + 1))]}" &
    b=$!
  fi
  wait "$a"
  [ -z "$b" ] || wait "$b"
done

failed=0
for t in "${targets[@]}"; do
  rc=$(cat "$work/$t.rc")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t.log")
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/$t.log")
  if [ "$rc" = 0 ]; then
    printf 'fuzz %-12s ok: %s inputs in %s s (%s/s)\n' "$t" "${execs:-?}" "$secs" "${speed:-?}" >&2
  else
    failed=1
    printf 'fuzz %-12s FAILED (status %s):\n' "$t" "$rc" >&2
    grep -vE '^(#[0-9]+|INFO:|	NEW_FUNC)' "$work/$t.log" | tail -n 60 >&2
  fi
done
echo "fuzz: ${#targets[@]} fuzzers, $((SECONDS - start)) s" >&2
[ $failed = 0 ] || { echo "fuzz: findings kept in $out/findings/" >&2; exit 1; }
