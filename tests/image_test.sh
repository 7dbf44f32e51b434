#!/usr/bin/env bash
# Issue 42, points 1 and 2: the image built and a job run from it.
#  1. deploy/image/build.sh builds pstrain:t-KEY with buildah from this build's programs on a
#     Debian 12 root that mmdebstrap makes from Debian's archive (no registry). KEY hashes
#     the programs and the image's recipes: a later run of the suite with the same ones finds
#     the image in the test's storage and builds nothing. Where it builds, it builds twice and
#     the two images must have the same layer digests and image ID (reproducible).
#  2. In the image, as its user (65532) on a read-only root (buildah run --isolation chroot;
#     podman run cannot set its rlimits on these machines): every shared library of the
#     three programs resolves (ldd), `pstrain-ps --help` and the launcher's `pstrain --help`
#     run, nothing can be written outside the volumes.
#  3. A sync job from the image, a ps and 2 workers each in a container of its own, the data
#     (Fashion-MNIST from this machine's dataset-fashion-mnist) a read-only volume, the ps's
#     summary on a writable one, the cluster secret from a read-only one: the same weights,
#     bit for bit (weights_checksum), and test accuracy as the same job run outside the image.
# The image's size and the build's time are in the PASS lines.
#
# Needs root, buildah, podman (its import) and mmdebstrap (./pstrain test installs them) and,
# for a first build, Debian's archive (mmdebstrap; about a minute). Without them it says why
# and skips. The storage (vfs) and mmdebstrap's roots are kept in $PSTRAIN_IMAGE_CACHE
# (default /var/cache/pstrain-image); delete it to start over.
source "$(dirname "$0")/lib.sh"

skip() {
  echo "SKIP: $*"
  echo "0 passed, 0 failed (skipped)"
  exit 0
}
[ "$(id -u)" = 0 ] || skip "buildah's storage and mounts need root (running as uid $(id -u))"
for tool in buildah mmdebstrap; do
  command -v "$tool" >/dev/null || skip "no '$tool' command (./pstrain test installs buildah, podman and mmdebstrap)"
done

IMAGE_DIR="$RUNFILES/deploy/image"
CACHE="${PSTRAIN_IMAGE_CACHE:-/var/cache/pstrain-image}"
STORE=(--root "$CACHE/storage" --runroot "$CACHE/run" --storage-driver vfs)
B=(buildah "${STORE[@]}")
EPOCH=1700000000
WORK="${TEST_TMPDIR:-$(mktemp -d)}/image"
rm -rf "$WORK"
mkdir -p "$WORK"
CTRS=() BINDS=()

image_cleanup() {
  local c p
  cleanup
  for p in "${BINDS[@]:-}"; do [ -n "$p" ] && umount "$p" 2>/dev/null || true; done
  for c in "${CTRS[@]:-}"; do [ -n "$c" ] && "${B[@]}" rm "$c" >/dev/null 2>&1 || true; done
}
trap image_cleanup EXIT

# 1. The image: built, or found by its key.
key=$(cat "$PS_BIN" "$WORKER_BIN" "$LAUNCHER_BIN" "$IMAGE_DIR/build.sh" "$IMAGE_DIR/Containerfile" \
        "$IMAGE_DIR/Containerfile.base" | sha256sum | cut -c1-16)
tag="t-$key"
image="localhost/pstrain:$tag"
layers() { "${B[@]}" inspect --type image --format '{{.OCIv1.RootFS.DiffIDs}}' "$1"; }
build() {
  "$IMAGE_DIR/build.sh" --engine buildah --root "$CACHE" --storage-driver vfs --cache "$CACHE" \
    --build-dir "$RUNFILES" --epoch "$EPOCH" --tag "$1" >>"$OUT/build.log" 2>&1 ||
    fail "build.sh --tag $1 failed: $(tail -n 3 "$OUT/build.log")"
}
mkdir -p "$CACHE"
exec 9>"$CACHE/lock"
flock 9
if "${B[@]}" inspect --type image "$image" >/dev/null 2>&1; then
  pass "the image $image (this build's programs and recipes) is in $CACHE from an earlier run: not built again"
else
  start=$SECONDS
  build "$tag"
  first=$((SECONDS - start))
  start=$SECONDS
  build "$tag-again"
  second=$((SECONDS - start))
  a=$(layers "$image") b=$(layers "localhost/pstrain:$tag-again")
  ida=$("${B[@]}" inspect --type image --format '{{.FromImageID}}' "$image")
  idb=$("${B[@]}" inspect --type image --format '{{.FromImageID}}' "localhost/pstrain:$tag-again")
  [ "$a" = "$b" ] && [ "$ida" = "$idb" ] ||
    fail "two builds from one build tree differ: layers $a, image $ida; then layers $b, image $idb"
  "${B[@]}" rmi "localhost/pstrain:$tag-again" >/dev/null
  # Earlier builds' images (other programs) and bases (other packages): only these are kept.
  base=$(grep -o 'pstrain-base:[0-9a-f]*' "$OUT/build.log" | tail -n 1 || true)
  if [ -n "$base" ]; then
    for old in $("${B[@]}" images --format '{{.Name}}:{{.Tag}}' | grep -E '/pstrain(-base)?:' |
                 grep -v -e ":$tag\$" -e "/$base\$" || true); do
      "${B[@]}" rmi "$old" >/dev/null 2>&1 || true
    done
    for old in "$CACHE"/base-*.tar; do
      [ "$old" = "$CACHE/base-${base#pstrain-base:}.tar" ] || rm -f "$old"
    done
  fi
  how="on the Debian root cached in $CACHE"
  grep -q "made the base with mmdebstrap" "$OUT/build.log" && how="from Debian's archive (mmdebstrap, no registry)"
  pass "build.sh built $image $how in ${first} s, and again in ${second} s with the same layers ($a) and image ID"
fi
flock -u 9
size=$("${B[@]}" images --format '{{.Size}}' "$image" | head -1)
nlayers=$(layers "$image" | wc -w)
pass "the image's size: $size in $nlayers layers (the Debian root with its packages, then the three programs)"

# new_container NAME: a container of the image in $CTR, its root read-only, with the mount
# points the volumes and buildah need made first (as a runtime makes them), and a tmpfs on
# /run (where buildah puts and then removes /run/.containerenv; podman --read-only does the
# same).
new_container() {
  local p
  CTR=$("${B[@]}" from --quiet --name "pstrain-test-$$-$1" "$image") || fail "buildah from $image failed"
  CTRS+=("$CTR")
  p=$("${B[@]}" mount "$CTR")
  mkdir -p "$p/data" "$p/var/lib/pstrain"
  touch "$p/etc/hosts" "$p/etc/hostname" "$p/etc/resolv.conf"
  mount --bind "$p" "$p"
  BINDS=("$p" "${BINDS[@]}")
  mount -o remount,ro,bind "$p"
  mount -t tmpfs -o size=1m,mode=0755,nosuid,nodev tmpfs "$p/run"
  BINDS=("$p/run" "${BINDS[@]}")
  touch "$p/run/.containerenv"
  mkdir -p "$p/run/pstrain/credentials"
}
# in_container [buildah run options] CTR -- CMD...: as the image's USER unless --user.
in_container() {
  "${B[@]}" run --isolation chroot --network host "$@"
}
start=$SECONDS
new_container probe
probe=$CTR

# 2. Inside: the user, the read-only root, every library, the programs' help.
out=$(in_container "$probe" -- /bin/sh -c 'id -u; id -g; for f in /tmp/x /usr/x /x; do touch $f 2>/dev/null && echo WRITABLE $f; done; for f in /usr/local/bin/*; do echo "== $f"; ldd "$f"; done' 2>&1) ||
  fail "the probe in the image failed: $out"
echo "$out" >"$OUT/ldd-in-image.out"
[ "$(sed -n 1p <<<"$out")" = 65532 ] && [ "$(sed -n 2p <<<"$out")" = 65532 ] ||
  fail "the image runs as uid/gid $(sed -n 1,2p <<<"$out" | xargs), not 65532"
! grep -q WRITABLE <<<"$out" || fail "the container's root is writable (/tmp)"
! grep -q 'not found' <<<"$out" || fail "a library does not resolve in the image: $(grep 'not found' <<<"$out" | head -3)"
nprog=$(grep -c '^== ' <<<"$out")
nlibs=$(grep -c '=> /' <<<"$out")
[ "$nprog" = 3 ] && [ "$nlibs" -gt 10 ] || fail "ldd in the image saw $nprog programs and $nlibs libraries"
for cmd in pstrain-ps pstrain; do
  rc=0
  in_container "$probe" -- "/usr/local/bin/$cmd" --help >"$OUT/help-$cmd.out" 2>&1 || rc=$?
  [ "$rc" = 0 ] && grep -q -- '--' "$OUT/help-$cmd.out" || fail "$cmd --help in the image: exit $rc"
done
pass "in the image as 65532:65532 on a read-only root: ldd resolves every library of the 3 programs ($nlibs in all), pstrain-ps --help and pstrain --help exit 0"

# 3. The job from the image, and the same job outside it.
secret=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
mkdir -p "$WORK/cred" "$WORK/state" "$WORK/outside"
printf '%s' "$secret" >"$WORK/cred/pstrain-secret"
chown -R 65532:65532 "$WORK/cred" "$WORK/state"
chmod 0500 "$WORK/cred"
chmod 0400 "$WORK/cred/pstrain-secret"
printf '%s' "$secret" >"$WORK/outside/secret"
chmod 0600 "$WORK/outside/secret"
JOB=(--workers 2 --mode sync --model mlp --epochs 1 --batch-size 64 --seed 7)
port=$(free_port)
new_container ps
ps_ctr=$CTR
w_ctrs=()
for i in 0 1; do new_container "w$i"; w_ctrs+=("$CTR"); done
t0=$SECONDS
start_bg img-ps in_container --user 65532:65532 -v "$WORK/state:/var/lib/pstrain" \
  -v "$WORK/cred:/run/pstrain/credentials:ro" "$ps_ctr" -- \
  timeout -s KILL 600 pstrain-ps --listen "127.0.0.1:$port" "${JOB[@]}" --status-interval 0 \
  --secret-file /run/pstrain/credentials/pstrain-secret --summary-json /var/lib/pstrain/summary.json
ps_pid=$LAST_PID
wpids=()
for i in 0 1; do
  start_bg "img-worker$i" in_container --user 65532:65532 -v "$DATA_DIR:/data:ro" \
    -v "$WORK/cred:/run/pstrain/credentials:ro" "${w_ctrs[$i]}" -- \
    timeout -s KILL 600 pstrain-worker --ps "127.0.0.1:$port" --index "$i" --data-dir /data --connect-timeout 60 \
    --secret-file /run/pstrain/credentials/pstrain-secret
  wpids+=("$LAST_PID")
done
for p in "${wpids[@]}" "$ps_pid"; do
  rc=0
  wait_pid "$p" 300 || rc=$?
  [ "$rc" = 0 ] || fail "a process of the job in the image exited $rc"
done
inside=$((SECONDS - t0))
[ -f "$WORK/state/summary.json" ] || fail "the ps in the image wrote no summary on its volume"

t0=$SECONDS
port=$(free_port)
start_ps out-ps --listen "127.0.0.1:$port" "${JOB[@]}" --secret-file "$WORK/outside/secret" \
  --summary-json "$WORK/outside/summary.json"
ps_pid=$LAST_PID
wpids=()
for i in 0 1; do
  start_worker "out-worker$i" --ps "127.0.0.1:$port" --index "$i" --secret-file "$WORK/outside/secret"
  wpids+=("$LAST_PID")
done
for p in "${wpids[@]}" "$ps_pid"; do
  rc=0
  wait_pid "$p" 300 || rc=$?
  [ "$rc" = 0 ] || fail "a process of the job outside the image exited $rc"
done
outside=$((SECONDS - t0))
cin=$(json_field "$WORK/state/summary.json" weights_checksum)
cout=$(json_field "$WORK/outside/summary.json" weights_checksum)
ain=$(json_field "$WORK/state/summary.json" test_accuracy)
aout=$(json_field "$WORK/outside/summary.json" test_accuracy)
[ "$cin" = "$cout" ] && [ "$ain" = "$aout" ] ||
  fail "the job in the image ended with weights $cin (accuracy $ain), outside it with $cout ($aout)"
at_least "$ain" 0.80 || fail "test accuracy $ain < 0.80 after 1 epoch"
pass "a sync job (ps and 2 workers, each in a container of the image, the data a read-only volume) ended with the weights of the same job outside the image, bit for bit ($cin), test accuracy $ain; ${inside} s in the image, ${outside} s outside"
echo "containers and job: $((SECONDS - start)) s"
echo "4 passed, 0 failed"
