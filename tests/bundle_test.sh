#!/usr/bin/env bash
# The relocatable bundle (issue 24, point 5; deploy/bundle.sh): with Fashion-MNIST it stays
# under 60 MiB; unpacked in an empty directory, every library its programs load comes from
# the bundle or is one a host must bring itself (glibc's, the C++ runtime, the driver and
# CUDA's); and from there, with nothing but PATH=/usr/bin:/bin in the environment, `run
# gpu-check --device cpu` (the dry run) passes every check on the bundled data, while `run
# gpu-check` on this GPU-less host says so and exits non-zero.
source "$(dirname "$0")/lib.sh"
tarball="$RUNFILES/deploy/pstrain-bundle-data.tar.xz"
[ -f "$tarball" ] || fail "no bundle at $tarball"
bytes=$(stat -L -c %s "$tarball")
[ "$bytes" -lt $((60 * 1024 * 1024)) ] || fail "the bundle is $bytes bytes, over 60 MiB"
pass "bundle with data: $((bytes / 1024 / 1024)) MiB"

dir="$OUT/unpacked"
rm -rf "$dir"
mkdir -p "$dir"
tar -C "$dir" -xJf "$tarball"
b="$dir/pstrain-bundle"
for f in run bin/launcher/pstrain bin/ps/pstrain-ps bin/worker/pstrain-worker \
         bin/kernels/cuda/libpstrain_cuda.so bin/kernels/cuda/cuda_parity_test \
         data/fashion-mnist/train-images-idx3-ubyte.gz; do
  [ -e "$b/$f" ] || fail "the bundle lacks $f"
done

# Where each program's libraries come from, with the bundle's lib/ first as `run` puts it.
allowed='^(linux-vdso|ld-linux-x86-64|libc|libm|libmvec|libpthread|libdl|librt|libutil|libresolv|libanl|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnvrtc[a-z-]*|libnvJitLink)\.so'
for p in $(cd "$b/bin" && find . -type f | sed 's|^\./||'); do
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    echo "$name" | grep -Eq "$allowed" && continue
    case "$path" in
      "$b"/lib/*) ;;
      *) fail "$p takes $name from $path, not from the bundle" ;;
    esac
  done < <(env -i LD_LIBRARY_PATH="$b/lib" ldd "$b/bin/$p")
done
pass "every non-system library comes from the bundle"

rc=0
(cd "$dir" && env -i PATH=/usr/bin:/bin HOME="$dir" ./pstrain-bundle/run gpu-check --device cpu \
  --out "$dir/report-dry") >"$OUT/dry.log" 2>&1 || rc=$?
[ $rc -eq 0 ] || fail "dry run from the bundle: rc $rc"
/usr/bin/python3 "$RUNFILES/tests/gpu_report_check.py" "$dir/report-dry/report.json" pass ||
  fail "dry run from the bundle: the report"
/usr/bin/python3 -c '
import json, sys
doc = json.load(open(sys.argv[1]))
data = [c for c in doc["checks"] if c["name"] == "data"][0]
sys.exit(0 if sys.argv[2] in data["detail"] else 1)' "$dir/report-dry/report.json" "$b/data/fashion-mnist" ||
  fail "the dry run did not default to the bundled data"
pass "dry run from the unpacked bundle, minimal environment, bundled data"

if env -i LD_LIBRARY_PATH="$b/lib" "$b/bin/worker/pstrain-worker" --list-devices 2>/dev/null |
   grep -q '^cuda:'; then
  echo "a GPU is here: the no-GPU case does not apply"
else
  rc=0
  (cd "$dir" && env -i PATH=/usr/bin:/bin HOME="$dir" ./pstrain-bundle/run gpu-check \
    --out "$dir/report-nogpu") >"$OUT/nogpu.log" 2>&1 || rc=$?
  [ $rc -eq 1 ] || fail "no GPU from the bundle: rc $rc"
  /usr/bin/python3 "$RUNFILES/tests/gpu_report_check.py" "$dir/report-nogpu/report.json" nogpu ||
    fail "no GPU from the bundle: the report"
  pass "no GPU: said, non-zero exit"
fi
echo "1 passed, 0 failed"
