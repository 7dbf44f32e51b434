#!/usr/bin/env bash
# Issue 25, point 3: the summary of `pstrain local --ps-shards K` tells the truth. Its
# weights_checksum is the whole model's (a shard holds one part, and FNV-1a cannot be put
# together from the parts' sums: the shards take it from the workers' evaluations of the
# last epoch), so a sync job ends with the same one over 1, 2 and 3 shards; every shard's
# summary names its own part ("shard": "I/K") and that part's checksum beside it. Checksums
# are compared as the hex strings the summaries hold; no log is read.
#  - sync, 2 workers, over 1, 2 and 3 shards: one model checksum, three times;
#  - each shard's part is its own: over K > 1 shards no part's checksum is the model's, and
#    the parts differ from each other;
#  - async over 2 shards: both summaries give one model checksum too (every worker
#    evaluates the final weights, pulled once all have finished).
source "$(dirname "$0")/lib.sh"

# check_summaries NAME K: every shard's summary of job NAME names its part and gives the
# model's checksum; prints that checksum.
check_summaries() {
  local name=$1 k=$2 i f sum part parts=()
  sum=$(json_field "$OUT/$name.json" weights_checksum) || fail "$name: no weights_checksum in the summary"
  for ((i = 0; i < k; i++)); do
    f="$OUT/$name.json"
    [ "$i" = 0 ] || f="$OUT/$name/summary-shard$i.json"
    [ "$(json_field "$f" shard)" = "$i/$k" ] || fail "$name: $(basename "$f") names its part '$(json_field "$f" shard)', not $i/$k"
    [ "$(json_field "$f" weights_checksum)" = "$sum" ] ||
      fail "$name: shard $i gives the model's checksum as $(json_field "$f" weights_checksum), shard 0 as $sum"
    part=$(json_field "$f" shard_checksum)
    if [ "$k" = 1 ]; then
      [ "$part" = "$sum" ] && [ "$(json_field "$f" weights_checksum_from)" = ps ] ||
        fail "$name: one ps holds the whole model, but its part's checksum is $part, the model's $sum"
    else
      [ "$part" != "$sum" ] && [ "$(json_field "$f" weights_checksum_from)" = workers ] ||
        fail "$name: shard $i gives its part's checksum $part as the model's"
    fi
    parts+=("$part")
  done
  [ "$(printf '%s\n' "${parts[@]}" | sort -u | wc -l)" = "$k" ] || fail "$name: two shards give one part's checksum: ${parts[*]}"
  echo "$sum"
}

sums=()
for k in 1 2 3; do
  "$LAUNCHER_BIN" local --workers 2 --mode sync --model mlp --epochs 1 --batch-size 256 --seed 7 \
    --ps-shards "$k" --run-dir "$OUT/sync$k" --summary-json "$OUT/sync$k.json" \
    >"$OUT/sync$k.out" 2>&1 || fail "sync over $k shards: pstrain local failed: $(tail -n 2 "$OUT/sync$k.out")"
  sums+=("$(check_summaries "sync$k" "$k")")
done
[ "${sums[0]}" = "${sums[1]}" ] && [ "${sums[0]}" = "${sums[2]}" ] ||
  fail "sync over 1, 2 and 3 shards: the summaries give the model's checksum as ${sums[*]}"
pass "sync over 1, 2 and 3 shards: weights_checksum ${sums[0]} each time; each shard names its part and that part's checksum"

"$LAUNCHER_BIN" local --workers 2 --mode async --model mlp --epochs 1 --batch-size 256 --seed 7 \
  --ps-shards 2 --run-dir "$OUT/async2" --summary-json "$OUT/async2.json" \
  >"$OUT/async2.out" 2>&1 || fail "async over 2 shards: pstrain local failed: $(tail -n 2 "$OUT/async2.out")"
sum=$(check_summaries async2 2)
pass "async over 2 shards: both summaries give the model's checksum $sum beside their parts'"
echo "2 passed, 0 failed"
