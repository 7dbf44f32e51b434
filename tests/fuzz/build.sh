#!/usr/bin/env bash
# Builds the libFuzzer harnesses with clang: tests/fuzz/build.sh OUTDIR [TARGET...]
#
# A plain script rather than Bazel: Debian's Bazel 4.2.3 uses gcc as its C toolchain, and
# libFuzzer needs clang's -fsanitize=fuzzer. The project's library sources (common/, proto/,
# model/ but model_config.c, ps/ but its main, data/data.c) are compiled here with
# coverage, ASan and UBSan into one static archive, so each harness links only the objects it
# uses, and against the same Debian libraries the daemons link. protoc-c's output is generated into
# OUTDIR/gen, as proto/BUILD's genrule does.
#
# Targets: wire_reader ps_server model_spec config tf_config idx (OUTDIR/fuzz_<target>)
# and make_seeds (OUTDIR/make_seeds, which rewrites the seed corpora). Default: all.
# CC and EXTRA_CFLAGS may be set. Objects are reused while their source and the project's
# headers are unchanged.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:?usage: tests/fuzz/build.sh OUTDIR [TARGET...]}
shift
mkdir -p "$out/gen/proto" "$out/obj"
out=$(cd "$out" && pwd)

CC=${CC:-clang}
command -v "$CC" >/dev/null || { echo "build.sh: $CC not found (apt-get install clang-14 libclang-rt-14-dev)" >&2; exit 1; }

# float-cast-overflow is in clang's "undefined" group; it is named anyway so that the flag
# list says what is checked. Nothing recovers: the first report is the finding.
SAN="-fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=undefined,float-cast-overflow"
CFLAGS=(-std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer -Wall -Wextra -Wno-unused-parameter
        -I"$root" -I"$out/gen" ${EXTRA_CFLAGS:-})
# Every library a daemon links; the archive's objects pull in only what they need.
LIBS=(-luv -lprotobuf-c -lcjson -linih -lsystemd -lz -lm)
[ -e /usr/include/sodium.h ] && LIBS+=(-lsodium)
[ -e /usr/include/openssl/ssl.h ] && LIBS+=(-lssl -lcrypto)
# Large blocks are kept on free lists instead of being unmapped each run (large_pool.c says
# why): malloc, realloc and free of the whole program go through it, zlib's too (static).
POOL=(-Wl,--wrap=malloc -Wl,--wrap=realloc -Wl,--wrap=free)
ZLIB=(-Wl,-Bstatic -lz -Wl,-Bdynamic)

# The schemas, compiled the way proto/BUILD's genrules do it (the ps's metrics write
# TensorBoard events, so the ps's objects need tensorboard.proto's too).
for schema in pstrain tensorboard; do
  if [ ! -f "$out/gen/proto/$schema.pb-c.c" ] || [ "$root/proto/$schema.proto" -nt "$out/gen/proto/$schema.pb-c.c" ]; then
    protoc-c --proto_path="$root/proto" --c_out="$out/gen/proto" "$root/proto/$schema.proto"
  fi
done

# A header of the project newer than the last build rebuilds every object.
stamp="$out/obj/.stamp"
all_new=0
if [ ! -f "$stamp" ] || [ -n "$(find "$root/common" "$root/proto" "$root/ps" "$root/kernels" "$root/model" \
    "$root/worker" "$out/gen" -maxdepth 2 -name '*.h' -newer "$stamp" 2>/dev/null | head -1)" ]; then
  all_new=1
fi

# obj SRC: prints the object's path, compiling it first when needed (1 on failure).
obj() {
  local src=$1 o
  o="$out/obj/$(echo "${src#"$root"/}" | tr '/' '_').o"
  if [ $all_new = 1 ] || [ ! -f "$o" ] || [ "$src" -nt "$o" ]; then
    "$CC" "${CFLAGS[@]}" $SAN -fsanitize=fuzzer-no-link -c "$src" -o "$o" >&2 || return 1
  fi
  echo "$o"
}

# The library archive. A source that does not compile (others may be half-way through an
# edit) is left out with a warning: only a harness that needs it then fails, at link time.
lib_sources() {
  echo "$out/gen/proto/pstrain.pb-c.c"
  echo "$out/gen/proto/tensorboard.pb-c.c"
  echo "$root/proto/ring.c"
  echo "$root/proto/wire.c"
  echo "$root/proto/send.c"
  echo "$root/proto/status_json.c"
  local m
  for m in canonical chunks init layer_line model optimizer_line presets spec_errors summary; do
    echo "$root/model/$m.c"
  done
  echo "$root/kernels/partition.c"
  echo "$root/data/data.c"
  local f
  for f in "$root"/common/*.c "$root"/ps/*.c "$root"/ps/*/*.c; do
    case "$(basename "$f")" in
      main.c | *_test.c | checkpoint_tool.c | bench_*.c) ;;
      *) echo "$f" ;;
    esac
  done
}
archive="$out/libpstrain_fuzz.a"
members=()
while read -r src; do
  if o=$(obj "$src"); then
    members+=("$o")
  else
    echo "build.sh: warning: $src does not compile; left out of the archive" >&2
  fi
done < <(lib_sources)
rm -f "$archive"
ar rcs "$archive" "${members[@]}"

# link NAME SOURCE [EXTRA SOURCE...] [-- LINK FLAGS...]
link() {
  local name=$1 objs=() flags=() s sep=0
  shift
  for s in "$@"; do
    if [ "$s" = "--" ]; then sep=1; elif [ $sep = 1 ]; then flags+=("$s"); else objs+=("$(obj "$here/$s")"); fi
  done
  echo "build.sh: $name" >&2
  "$CC" $SAN -fsanitize=fuzzer "${objs[@]}" "${flags[@]}" "$archive" "${LIBS[@]}" -o "$out/$name"
}

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(wire_reader ps_server model_spec config tf_config idx make_seeds)
for t in "${targets[@]}"; do
  case "$t" in
    wire_reader | ps_server) link "fuzz_$t" "fuzz_$t.c" large_pool.c -- "${POOL[@]}" ;;
    idx) link "fuzz_$t" "fuzz_$t.c" large_pool.c -- "${POOL[@]}" "${ZLIB[@]}" ;;
    model_spec | config | tf_config) link "fuzz_$t" "fuzz_$t.c" ;;
    make_seeds)
      # A plain program (no fuzzer, no sanitizers): writes the seed corpora.
      echo "build.sh: make_seeds" >&2
      "$CC" "${CFLAGS[@]}" "$here/make_seeds.c" "$root/proto/wire.c" "$root/proto/ring.c" "$out/gen/proto/pstrain.pb-c.c" \
        "$root/common/log.c" "$root/common/codec.c" -lprotobuf-c -lz -lm -o "$out/make_seeds" ;;
    *) echo "build.sh: unknown target '$t'" >&2; exit 2 ;;
  esac
done
touch "$stamp"
