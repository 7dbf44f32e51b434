#!/usr/bin/env bash
# Builds the pstrain image from the build's programs and Debian's archive, with buildah or
# podman; with --gpu also the GPU image (Containerfile.gpu). See deploy/README.md,
# "Kubernetes", 1.
#
#   deploy/image/build.sh [--gpu] [--tag TAG] [--base IMAGE] [--build-dir DIR] [--cuda-dir DIR]
#                         [--engine buildah|podman] [--root DIR] [--storage-driver DRIVER]
#                         [--cache DIR] [--mirror SOURCES] [--epoch SECONDS] [--context DIR]
#                         [--dry-run] [--print-packages]
#
#   --tag TAG        the images' tag (default: latest): pstrain:TAG, pstrain-gpu:TAG
#   --base IMAGE     build the base from IMAGE with apt-get (e.g. debian:bookworm-slim, where
#                    a registry is reachable); default: a Debian 12 root made by mmdebstrap
#                    from Debian's archive, imported as localhost/pstrain-base:KEY
#   --build-dir DIR  where the built programs are (default: bazel-bin of this checkout):
#                    bazel build //ps:pstrain-ps //worker:pstrain-worker //launcher:pstrain
#                    (and //kernels/cuda:libpstrain_cuda.so for --gpu)
#   --cuda-dir DIR   the CUDA libraries for --gpu (default: /usr/local/cuda/lib64)
#   --engine E       buildah or podman (default: buildah when installed, else podman)
#   --root DIR       the engine's storage in DIR/storage and DIR/run (default: its own)
#   --storage-driver D  the engine's storage driver (e.g. vfs where overlay is not allowed)
#   --cache DIR      where mmdebstrap's roots are kept, by their key (default:
#                    /var/cache/pstrain-image)
#   --mirror SOURCES mmdebstrap's mirror or sources file (default: mmdebstrap's own, Debian's
#                    archive with the suite's updates and security)
#   --epoch SECONDS  SOURCE_DATE_EPOCH: every file's and the image's time (default:
#                    $SOURCE_DATE_EPOCH, else the checkout's last commit, else 0)
#   --context DIR    make the build context in DIR (default: a temporary one, removed)
#   --dry-run        make the context and print the commands instead of running them
#   --print-packages print the Debian packages the image gets (from ldd and dpkg -S of the
#                    programs, and dataset-fashion-mnist) and exit
#
# The packages are those that hold the libraries the programs link, found with ldd and
# dpkg -S on this (Debian 12) machine. Nothing is downloaded when the image runs. Two builds
# from one build tree give the same layer digests (deploy/README.md, "Kubernetes", 1).
#
# Exit status: 0 built (or printed), 1 no engine or a build failed, 2 bad arguments or a
# missing program or library.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
gpu=0 tag=latest base="" build_dir="$root/bazel-bin" cuda_dir=/usr/local/cuda/lib64 engine=""
store_root="" driver="" cache=/var/cache/pstrain-image mirror="" epoch="" context="" dry=0
print_packages=0
SUITE=bookworm
need() { [ $# -ge 2 ] || { echo "build.sh: $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
  case "$1" in
    --gpu) gpu=1; shift ;;
    --tag) need "$@"; tag=$2; shift 2 ;;
    --base) need "$@"; base=$2; shift 2 ;;
    --build-dir) need "$@"; build_dir=$2; shift 2 ;;
    --cuda-dir) need "$@"; cuda_dir=$2; shift 2 ;;
    --engine) need "$@"; engine=$2; shift 2 ;;
    --root) need "$@"; store_root=$2; shift 2 ;;
    --storage-driver) need "$@"; driver=$2; shift 2 ;;
    --cache) need "$@"; cache=$2; shift 2 ;;
    --mirror) need "$@"; mirror=$2; shift 2 ;;
    --epoch) need "$@"; epoch=$2; shift 2 ;;
    --context) need "$@"; context=$2; shift 2 ;;
    --dry-run) dry=1; shift ;;
    --print-packages) print_packages=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "build.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
case "$tag" in ''|*[!A-Za-z0-9_.-]*) echo "build.sh: --tag '$tag' is not an image tag" >&2; exit 2 ;; esac
if [ -z "$epoch" ]; then
  epoch=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)}
fi
case "$epoch" in ''|*[!0-9]*) echo "build.sh: --epoch '$epoch' is not a number of seconds" >&2; exit 2 ;; esac
export SOURCE_DATE_EPOCH=$epoch

PROGRAMS=(ps/pstrain-ps worker/pstrain-worker launcher/pstrain)
for p in "${PROGRAMS[@]}"; do
  [ -f "$build_dir/$p" ] ||
    { echo "build.sh: $build_dir/$p is missing (bazel build //ps:pstrain-ps //worker:pstrain-worker //launcher:pstrain)" >&2; exit 2; }
done

# The Debian package of each library a program links: ldd's path, as dpkg knows it (Debian
# 12 lists some under /lib, which is /usr/lib), else its real path.
package_of() {
  local lib=$1 real out
  real=$(readlink -f "$lib")
  for f in "$lib" "$real" "/usr${lib#/usr}" "${lib#/usr}" "/usr${real#/usr}" "${real#/usr}"; do
    out=$(dpkg-query -S "$f" 2>/dev/null | head -1) && [ -n "$out" ] && { echo "${out%%:*}"; return 0; }
  done
  return 1
}
packages=()
for p in "${PROGRAMS[@]}"; do
  libs=$(ldd "$build_dir/$p") || { echo "build.sh: ldd $build_dir/$p failed" >&2; exit 2; }
  if grep -q 'not found' <<<"$libs"; then
    echo "build.sh: $p links a library this machine lacks: $(grep 'not found' <<<"$libs" | head -1 | xargs)" >&2
    exit 2
  fi
  for lib in $(awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' <<<"$libs"); do
    pkg=$(package_of "$lib") || { echo "build.sh: no Debian package holds $lib (linked by $p)" >&2; exit 2; }
    packages+=("$pkg")
  done
done
packages+=(dataset-fashion-mnist)
mapfile -t packages < <(printf '%s\n' "${packages[@]}" | sort -u)
if [ $print_packages = 1 ]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

if [ -z "$engine" ]; then
  if command -v buildah >/dev/null; then engine=buildah
  elif command -v podman >/dev/null; then engine=podman
  elif [ $dry = 0 ]; then
    echo "build.sh: neither buildah nor podman is installed (apt-get install buildah podman mmdebstrap); --dry-run makes the context and shows the commands" >&2
    exit 1
  else engine=buildah
  fi
fi
case "$engine" in buildah|podman) ;; *) echo "build.sh: --engine '$engine' is not buildah or podman" >&2; exit 2 ;; esac
eng=("$engine")
[ -z "$store_root" ] || eng+=(--root "$store_root/storage" --runroot "$store_root/run")
[ -z "$driver" ] || eng+=(--storage-driver "$driver")

if [ -n "$context" ]; then
  mkdir -p "$context"
else
  context=$(mktemp -d)
  [ $dry = 1 ] || trap 'rm -rf "$context"' EXIT
fi

# The context: the recipes, bin/ with the programs (copied: bazel-bin's are links, and
# their times are the epoch's) and the package list.
cp "$here/Containerfile" "$here/Containerfile.base" "$here/Containerfile.gpu" "$context/"
rm -rf "${context:?}/bin" "${context:?}/cuda"
mkdir -p "$context/bin" "$context/cuda"
for p in "${PROGRAMS[@]}"; do
  cp -L "$build_dir/$p" "$context/bin/"
  chmod 0755 "$context/bin/$(basename "$p")"
done
printf '%s\n' "${packages[@]}" >"$context/packages.txt"
if [ $gpu = 1 ]; then
  lib="$build_dir/kernels/cuda/libpstrain_cuda.so"
  [ -f "$lib" ] || { echo "build.sh: $lib is missing: the GPU image needs the CUDA build (bazel build //kernels/cuda:libpstrain_cuda.so, with the CUDA toolkit at /usr/local/cuda)" >&2; exit 2; }
  cp -L "$lib" "$context/cuda/"
  # What the backend links (and cuDNN's own parts, which it opens by name), soname links too.
  for pat in 'libcudart.so.13*' 'libcublas.so.13*' 'libcublasLt.so.13*' 'libcudnn*.so.9*'; do
    found=$(find "$cuda_dir/" -maxdepth 1 -name "$pat" | head -1)
    [ -n "$found" ] || { echo "build.sh: no $pat in $cuda_dir (give --cuda-dir)" >&2; exit 2; }
    find "$cuda_dir/" -maxdepth 1 -name "$pat" -exec cp -P {} "$context/cuda/" \;
  done
fi
find "$context" -exec touch -h -d "@$epoch" {} +

run() {
  if [ $dry = 1 ]; then printf '%q ' "$@"; echo; else "$@"; fi
}
quiet() {
  if [ $dry = 1 ]; then run "$@"; else "$@" >/dev/null; fi
}
image_exists() {
  [ $dry = 0 ] && "${eng[@]}" inspect --type image "$1" >/dev/null 2>&1
}

# The base: Debian 12 with the packages, from mmdebstrap (by default) or from --base.
# Its key: what decides its contents.
key=$( { echo "suite=$SUITE base=$base mirror=$mirror epoch=$epoch"; printf '%s\n' "${packages[@]}"
         cat "$here/Containerfile.base"; sed -n '/^# MMDEBSTRAP$/,/^# END$/p' "$0"; } |
       sha256sum | cut -c1-16)
base_image="localhost/pstrain-base:$key"
echo "build.sh: the base is $base_image" >&2
if image_exists "$base_image"; then
  echo "build.sh: the base $base_image is there already" >&2
elif [ -n "$base" ]; then
  run "${eng[@]}" build --isolation chroot --timestamp "$epoch" -f "$context/Containerfile.base" \
    --build-arg "BASE=$base" --build-arg "PACKAGES=${packages[*]}" -t "$base_image" "$context"
else
  command -v mmdebstrap >/dev/null || [ $dry = 1 ] ||
    { echo "build.sh: mmdebstrap is not installed (apt-get install mmdebstrap), or give --base IMAGE" >&2; exit 1; }
  tarball="$cache/base-$key.tar"
  if [ ! -f "$tarball" ]; then
    [ $dry = 1 ] || mkdir -p "$cache"
    # MMDEBSTRAP
    # minbase and the packages; no manuals, translations or documents but the copyright
    # files; with SOURCE_DATE_EPOCH set, mmdebstrap's output is reproducible.
    mm=(mmdebstrap --quiet --format=tar --variant=minbase --include="$(IFS=,; echo "${packages[*]}")"
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*'
        --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias'
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
        "$SUITE" "$tarball.part")
    # END
    [ -z "$mirror" ] || mm+=("$mirror")
    if [ $dry = 1 ]; then
      run "${mm[@]}"
    else
      start=$SECONDS
      "${mm[@]}" </dev/null >&2 || { rm -f "$tarball.part"; echo "build.sh: mmdebstrap failed (is Debian's archive reachable?)" >&2; exit 1; }
      mv "$tarball.part" "$tarball"
      echo "build.sh: made the base with mmdebstrap in $((SECONDS - start)) s: $tarball" >&2
    fi
  fi
  if [ "$engine" = buildah ]; then
    # A scratch container with the root added, committed at the epoch: the same layer and
    # the same image ID every time.
    if [ $dry = 1 ]; then
      run "${eng[@]}" from scratch
      run "${eng[@]}" add CONTAINER "$tarball" /
      run "${eng[@]}" commit --timestamp "$epoch" CONTAINER "$base_image"
    else
      ctr=$("${eng[@]}" from --quiet scratch)
      "${eng[@]}" add --quiet "$ctr" "$tarball" / >/dev/null
      "${eng[@]}" commit --quiet --timestamp "$epoch" --rm "$ctr" "$base_image" >/dev/null
    fi
  else
    # podman import: the tarball is the layer, byte for byte (the same digest every time;
    # the image's config has the time of the import).
    quiet "${eng[@]}" import --quiet "$tarball" "$base_image"
  fi
fi

build=("${eng[@]}" build --isolation chroot --timestamp "$epoch")
run "${build[@]}" -f "$context/Containerfile" --build-arg "BASE=$base_image" -t "pstrain:$tag" "$context"
[ $gpu = 0 ] ||
  run "${build[@]}" -f "$context/Containerfile.gpu" --build-arg "BASE=pstrain:$tag" -t "pstrain-gpu:$tag" "$context"
if [ $dry = 1 ]; then
  echo "# context: $context"
else
  for img in "pstrain:$tag" $([ $gpu = 0 ] || echo "pstrain-gpu:$tag"); do
    echo "build.sh: built $img ($("${eng[@]}" images --format '{{.Size}}' "$img" | head -1))" >&2
  done
fi
exit 0
