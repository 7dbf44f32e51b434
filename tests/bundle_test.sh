#!/usr/bin/env bash
# The relocatable bundle (issue 24, point 5; deploy/bundle.sh): with Fashion-MNIST it stays
# under 60 MiB; unpacked in an empty directory, every library its programs load comes from
# the bundle or is one a host must bring itself (glibc's, the C++ runtime, the driver and
# CUDA's); the link tools it carries for `--link` (ip, tc, iptables with its extensions) run
# from it alone, iptables adding the delay line's NFQUEUE rule in a namespace of its own;
# and from there, with nothing but PATH=/usr/bin:/bin in the environment, `run gpu-check
# --device cpu` (the dry run, its slow-links check over the bundle's tools) passes every
# check on the bundled data, while `run gpu-check` on this GPU-less host says so and exits
# non-zero.
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
         sbin/ip sbin/tc sbin/iptables lib/xtables/libxt_NFQUEUE.so \
         data/fashion-mnist/train-images-idx3-ubyte.gz; do
  [ -e "$b/$f" ] || fail "the bundle lacks $f"
done

# Where each program's libraries come from, with the bundle's lib/ first as `run` puts it.
allowed='^(linux-vdso|ld-linux-x86-64|libc|libm|libmvec|libpthread|libdl|librt|libutil|libresolv|libanl|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnvrtc[a-z-]*|libnvJitLink)\.so'
for p in $(cd "$b" && find bin sbin -type f); do
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    echo "$name" | grep -Eq "$allowed" && continue
    case "$path" in
      "$b"/lib/*) ;;
      *) fail "$p takes $name from $path, not from the bundle" ;;
    esac
  done < <(env -i LD_LIBRARY_PATH="$b/lib" ldd "$b/$p")
done
pass "every non-system library comes from the bundle"

# The link tools from the bundle alone: their versions, and the delay line's rule (an
# NFQUEUE target, an extension from lib/xtables) in a network namespace of this test's own.
tools_env=(env -i LD_LIBRARY_PATH="$b/lib" XTABLES_LIBDIR="$b/lib/xtables")
"${tools_env[@]}" "$b/sbin/ip" -V >/dev/null || fail "the bundle's ip does not run"
"${tools_env[@]}" "$b/sbin/tc" -V >/dev/null || fail "the bundle's tc does not run"
rules=$("${tools_env[@]}" /usr/bin/unshare -n sh -c "'$b/sbin/iptables' -w -A INPUT -s 10.214.0.2 \
  -j NFQUEUE --queue-num 3 && '$b/sbin/iptables' -w -S INPUT") ||
  fail "the bundle's iptables could not add an NFQUEUE rule"
echo "$rules" | grep -q -- "-s 10.214.0.2/32 -j NFQUEUE --queue-num 3" ||
  fail "the bundle's iptables listed: $rules"
pass "the link tools run from the bundle (iptables: $(echo "$rules" | tail -n 1))"

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
