#!/bin/sh
# pstrain-bundle/run: runs a pstrain command from this bundle (deploy/bundle.sh made it) on
# a host without build tools or packages:
#   ./pstrain-bundle/run gpu-check              everything GPU-related, with a report
#   ./pstrain-bundle/run local --gpus 0 ...     any pstrain command
# It finds the host's CUDA runtime, cuBLAS and cuDNN, puts them and the bundle's own
# libraries on the library path, tells the launcher where the daemons and the CUDA backend
# are, and makes the bundled data set the default data directory. Plain sh: nothing but
# the host's /bin is needed.
set -eu
here=$(cd "$(dirname "$0")" && pwd)

# The CUDA libraries the backend links (kernels/cuda/BUILD). cuBLAS needs cuBLASLt beside
# it, and cuDNN loads its engine libraries from its own folder.
CUDA_LIBS="libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9"

# A folder holding library $1: the loader's cache first (nothing to add then: prints
# nothing), then a toolkit, then any Python environment's nvidia-* wheels
# (.../site-packages/nvidia/*/lib). Returns 1 when none has it.
find_lib() {
  for ldconfig in /sbin/ldconfig /usr/sbin/ldconfig; do
    if [ -x "$ldconfig" ] && "$ldconfig" -p 2>/dev/null | grep -q " $1 "; then return 0; fi
  done
  for d in /usr/local/cuda/lib64 /usr/local/cuda-*/lib64 /usr/local/cuda-*/targets/*/lib \
           /usr/lib/x86_64-linux-gnu; do
    if [ -e "$d/$1" ]; then echo "$d"; return 0; fi
  done
  for root in ${VIRTUAL_ENV:-} ${CONDA_PREFIX:-} /usr/local/lib /usr/lib /opt ${HOME:-/root}; do
    [ -d "$root" ] || continue
    f=$(find "$root" -name "$1" -path '*nvidia*' 2>/dev/null | head -n 1)
    if [ -n "$f" ]; then dirname "$f"; return 0; fi
  done
  return 1
}

dirs="${PSTRAIN_CUDA_LIB_DIRS:-}"
if [ -z "$dirs" ]; then
  missing=""
  for lib in $CUDA_LIBS; do
    if d=$(find_lib "$lib"); then
      if [ -n "$d" ]; then
        case ":$dirs:" in *":$d:"*) ;; *) dirs="${dirs:+$dirs:}$d" ;; esac
      fi
    else
      missing="$missing $lib"
    fi
  done
  if [ -n "$missing" ]; then
    echo "pstrain-bundle/run: not found on this host:$missing; commands that use a GPU will" \
         "say so (set PSTRAIN_CUDA_LIB_DIRS=dir:dir to name their folders)" >&2
  fi
fi

LD_LIBRARY_PATH="$here/lib${dirs:+:$dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
PSTRAIN_PS_BIN="$here/bin/ps/pstrain-ps"
PSTRAIN_WORKER_BIN="$here/bin/worker/pstrain-worker"
PSTRAIN_BENCHCLIENT_BIN="$here/bin/tools/pstrain-benchclient"
PSTRAIN_CUDA_LIB="$here/bin/kernels/cuda/libpstrain_cuda.so"
export LD_LIBRARY_PATH PSTRAIN_PS_BIN PSTRAIN_WORKER_BIN PSTRAIN_BENCHCLIENT_BIN PSTRAIN_CUDA_LIB

# The link tools `--link` runs (ip, tc, iptables: deploy/bundle.sh says why they travel)
# first on PATH, and iptables' extensions beside them: GPU hosts' images often lack them,
# and the bundle's, built for Debian 12, run on any newer kernel.
PATH="$here/sbin:${PATH:-/usr/bin:/bin}"
XTABLES_LIBDIR="$here/lib/xtables"
export PATH XTABLES_LIBDIR

# The bundled data as the default of every command that reads data (the launcher's run
# flags and gpu-check's read these variables); a --data-dir flag still wins.
if [ -d "$here/data/fashion-mnist" ]; then
  PSTRAIN_LOCAL_DATA_DIR="${PSTRAIN_LOCAL_DATA_DIR:-$here/data/fashion-mnist}"
  PSTRAIN_GPU_CHECK_DATA_DIR="${PSTRAIN_GPU_CHECK_DATA_DIR:-$here/data/fashion-mnist}"
  export PSTRAIN_LOCAL_DATA_DIR PSTRAIN_GPU_CHECK_DATA_DIR
fi

exec "$here/bin/launcher/pstrain" "$@"
