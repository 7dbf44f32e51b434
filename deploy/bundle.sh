#!/usr/bin/env bash
# Makes the relocatable bundle for a GPU host that has a driver and the CUDA runtime, cuBLAS
# and cuDNN (pip's nvidia-* wheels or a toolkit) but no build tools, no package archive and
# no network: pstrain-bundle/ with the daemons, the launcher, the CUDA backend, the test
# binaries gpu-check runs, the shared libraries they link that such a host may lack, an
# optional data set, and `run`, which finds the host's CUDA libraries and runs any pstrain
# command. deploy/README.md ("A bundle for hosts without packages") says how to use it.
#
#   bundle.sh --bin-dir DIR --run FILE --out FILE.tar.xz [--with-data DIR]
#
# DIR is a Bazel output tree (bazel-bin, or $(BINDIR) in deploy/BUILD's genrule), FILE the
# `run` script (deploy/bundle_run.sh). `./pstrain bundle` builds and calls this.
set -euo pipefail

bin_dir="" run_script="" out="" data=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bin-dir) bin_dir=$2; shift 2 ;;
    --run) run_script=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --with-data) data=$2; shift 2 ;;
    *) echo "bundle.sh: unknown argument '$1' (see the comment at its top)" >&2; exit 2 ;;
  esac
done
[ -n "$bin_dir" ] && [ -n "$run_script" ] && [ -n "$out" ] ||
  { echo "bundle.sh: --bin-dir, --run and --out are needed" >&2; exit 2; }

# The programs, in the Bazel output tree's layout, which is where they look for each other:
# the launcher finds ../ps/pstrain-ps and ../kernels/cuda/<test>, the worker and the tests
# ../kernels/cuda/libpstrain_cuda.so or the one beside them.
PROGRAMS=(
  launcher/pstrain
  ps/pstrain-ps
  worker/pstrain-worker
  tools/pstrain-benchclient
  kernels/cuda/libpstrain_cuda.so
  kernels/cuda/cuda_parity_test
  kernels/cuda/preset_parity_test
  kernels/cuda/layered_test
  kernels/cuda/device_test
  kernels/pipeline/stages_parity_test
)

# The programs `--link` runs (launcher/links/link.c): iproute2's ip and tc for the namespaces, the
# veth pairs and the rate, and iptables for the delay line where the kernel has no netem
# (issue 27). GPU hosts' images often have none of them; the launcher looks on PATH first,
# where `run` puts sbin/. iptables is the multi-call binary it links to (xtables-nft-multi
# on Debian 12), which picks its personality from the name it is called by, and loads its
# matches and targets (NFQUEUE) from lib/xtables ($XTABLES_LIBDIR, set by `run`).
LINK_TOOLS=(ip tc iptables)
XTABLES_DIR=/usr/lib/x86_64-linux-gnu/xtables

# Libraries every host has, or must bring itself: glibc's, the C++ runtime the CUDA
# libraries link too, and the driver and CUDA libraries, which must match the host's GPU.
SYSTEM_LIBS='^(linux-vdso|ld-linux-x86-64|libc|libm|libmvec|libpthread|libdl|librt|libutil|libresolv|libanl|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnvrtc[a-z-]*|libnvJitLink)\.so'

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stage="$work/pstrain-bundle"
mkdir -p "$stage/lib"

for p in "${PROGRAMS[@]}"; do
  [ -f "$bin_dir/$p" ] || { echo "bundle.sh: $bin_dir/$p is missing (build it first)" >&2; exit 1; }
  mkdir -p "$stage/bin/$(dirname "$p")"
  cp -L "$bin_dir/$p" "$stage/bin/$p"
  chmod u+w "$stage/bin/$p"
done

mkdir -p "$stage/sbin"
for t in "${LINK_TOOLS[@]}"; do
  found=""
  for d in /usr/sbin /usr/bin /sbin /bin; do
    if [ -x "$d/$t" ]; then found=$(readlink -f "$d/$t"); break; fi
  done
  [ -n "$found" ] || { echo "bundle.sh: $t is not installed here (./pstrain installs it)" >&2; exit 1; }
  cp "$found" "$stage/sbin/$t"
  chmod u+w "$stage/sbin/$t"
done
[ -d "$XTABLES_DIR" ] || { echo "bundle.sh: $XTABLES_DIR is missing (iptables' extensions)" >&2; exit 1; }
mkdir -p "$stage/lib/xtables"
cp -L "$XTABLES_DIR"/*.so "$stage/lib/xtables/"

# Every shared library the programs and the link tools link, as the loader resolves it here,
# except the system's: ldd lists the whole closure. One that is not found is an error,
# unless it is a CUDA library, which the host brings.
for p in "${PROGRAMS[@]/#/bin/}" "${LINK_TOOLS[@]/#/sbin/}"; do
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    if echo "$name" | grep -Eq "$SYSTEM_LIBS"; then continue; fi
    if [ "$path" = "not" ]; then
      echo "bundle.sh: $p needs $name, which is not found here" >&2
      exit 1
    fi
    [ -e "$stage/lib/$name" ] || cp -L "$path" "$stage/lib/$name"
  done < <(ldd "$stage/$p")
done
chmod u+w "$stage"/lib/* "$stage"/lib/xtables/*

if [ -n "$data" ]; then
  mkdir -p "$stage/data/fashion-mnist"
  for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte \
           t10k-labels-idx1-ubyte; do
    [ -f "$data/$f.gz" ] || { echo "bundle.sh: $data/$f.gz is missing" >&2; exit 1; }
    cp -L "$data/$f.gz" "$stage/data/fashion-mnist/"
  done
fi

cp -L "$run_script" "$stage/run"
chmod 755 "$stage/run"
cat >"$stage/README" <<'EOF'
pstrain, relocatable: unpack anywhere and run

    ./pstrain-bundle/run gpu-check           # everything GPU-related, with a report
    ./pstrain-bundle/run local --gpus 0 ...  # any pstrain command (--help lists them)

`--link` (emulated links, issue 27) needs root; the bundle brings the ip, tc and iptables
it runs (sbin/), which `run` puts first on PATH.

`run` finds the host's CUDA runtime, cuBLAS and cuDNN (a toolkit under /usr/local/cuda*,
or pip's nvidia-* wheels; PSTRAIN_CUDA_LIB_DIRS=dir:dir names them instead), puts them
and lib/ on the library path, and passes data/fashion-mnist as the data directory when
the bundle has it. The host needs an NVIDIA driver and glibc 2.36 or newer. See
deploy/README.md in the sources ("A bundle for hosts without packages").
EOF

# Byte-for-byte the same archive from the same files: sorted, no owners, fixed times.
tar -C "$work" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - pstrain-bundle |
  xz -T0 -6 >"$out.tmp"
mv "$out.tmp" "$out"
