#!/usr/bin/env bash
# Builds the pstrain image (Containerfile) with podman or buildah, whichever is installed,
# from the build's binaries; with --gpu also the GPU image (Containerfile.gpu). See
# deploy/README.md, "Kubernetes".
#
#   deploy/image/build.sh [--gpu] [--tag TAG] [--build-dir DIR] [--cuda-dir DIR]
#                         [--engine podman|buildah] [--context DIR] [--dry-run]
#
#   --tag TAG        the images' tag (default: latest): pstrain:TAG, pstrain-gpu:TAG
#   --build-dir DIR  where the built programs are (default: bazel-bin of this checkout):
#                    bazel build //ps:pstrain-ps //worker:pstrain-worker //launcher:pstrain
#                    (and //kernels/cuda:libpstrain_cuda.so for --gpu)
#   --cuda-dir DIR   the CUDA libraries for --gpu (default: /usr/local/cuda/lib64)
#   --context DIR    make the build context in DIR (default: a temporary one, removed)
#   --dry-run        make the context and print the build commands instead of running them
#
# Exit status: 0 built (or printed), 1 no engine or a build failed, 2 bad arguments or a
# missing program or library.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
gpu=0 tag=latest build_dir="$root/bazel-bin" cuda_dir=/usr/local/cuda/lib64 engine="" context=""
dry=0
while [ $# -gt 0 ]; do
  case "$1" in
    --gpu) gpu=1; shift ;;
    --tag) tag=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --cuda-dir) cuda_dir=$2; shift 2 ;;
    --engine) engine=$2; shift 2 ;;
    --context) context=$2; shift 2 ;;
    --dry-run) dry=1; shift ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
case "$tag" in ''|*[!A-Za-z0-9_.-]*) echo "build.sh: --tag '$tag' is not an image tag" >&2; exit 2 ;; esac

if [ -z "$engine" ]; then
  if command -v podman >/dev/null; then engine=podman
  elif command -v buildah >/dev/null; then engine=buildah
  elif [ $dry = 0 ]; then
    echo "build.sh: neither podman nor buildah is installed (apt-get install podman); --dry-run makes the context and shows the commands" >&2
    exit 1
  else engine=podman
  fi
fi
case "$engine" in
  podman) build=(podman build) ;;
  buildah) build=(buildah build) ;;
  *) echo "build.sh: --engine '$engine' is not podman or buildah" >&2; exit 2 ;;
esac

if [ -n "$context" ]; then
  mkdir -p "$context"
else
  context=$(mktemp -d)
  [ $dry = 1 ] || trap 'rm -rf "$context"' EXIT
fi

# The context: the recipe and bin/ with the programs, copied (bazel-bin's are links).
cp "$here/Containerfile" "$here/Containerfile.gpu" "$context/"
mkdir -p "$context/bin" "$context/cuda"
for p in ps/pstrain-ps worker/pstrain-worker launcher/pstrain; do
  [ -f "$build_dir/$p" ] ||
    { echo "build.sh: $build_dir/$p is missing (bazel build //ps:pstrain-ps //worker:pstrain-worker //launcher:pstrain)" >&2; exit 2; }
  cp -L "$build_dir/$p" "$context/bin/"
  chmod 0755 "$context/bin/$(basename "$p")"
done
if [ $gpu = 1 ]; then
  lib="$build_dir/kernels/cuda/libpstrain_cuda.so"
  [ -f "$lib" ] || { echo "build.sh: $lib is missing (bazel build //kernels/cuda:libpstrain_cuda.so)" >&2; exit 2; }
  cp -L "$lib" "$context/cuda/"
  # What the backend links (and cuDNN's own parts, which it opens by name), soname links too.
  for pat in 'libcudart.so.13*' 'libcublas.so.13*' 'libcublasLt.so.13*' 'libcudnn*.so.9*'; do
    found=$(find "$cuda_dir/" -maxdepth 1 -name "$pat" | head -1)
    [ -n "$found" ] || { echo "build.sh: no $pat in $cuda_dir (give --cuda-dir)" >&2; exit 2; }
    find "$cuda_dir/" -maxdepth 1 -name "$pat" -exec cp -P {} "$context/cuda/" \;
  done
fi

run() {
  if [ $dry = 1 ]; then printf '%q ' "$@"; echo; else "$@"; fi
}
run "${build[@]}" -f "$context/Containerfile" -t "pstrain:$tag" "$context"
[ $gpu = 0 ] ||
  run "${build[@]}" -f "$context/Containerfile.gpu" --build-arg "BASE=pstrain:$tag" -t "pstrain-gpu:$tag" "$context"
[ $dry = 1 ] && echo "# context: $context"
exit 0
