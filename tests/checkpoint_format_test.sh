#!/usr/bin/env bash
# Checkpoint files as other tools see them: a checkpoint of known vectors (ps/state/checkpoint_tool)
# read back by tests/read_safetensors.py, a stdlib-only reader of the documented safetensors
# format (and by the safetensors package, where installed), must give the names, shapes,
# values, metadata and weights checksum written; `pstrain export` must turn it into a
# safetensors file and an npz that zipfile (and numpy, where installed) read back equal, and
# must refuse bad input with one line and a non-zero exit.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
TOOL="$RUNFILES/ps/state/checkpoint_tool"
READER="$RUNFILES/tests/read_safetensors.py"
WORK="$(mktemp -d "${TEST_TMPDIR:-/tmp}/ckpt-format-XXXXXX")"
trap 'cleanup; rm -rf "$WORK"' EXIT
passed=0

expect_list() { # FILE: the expected --list output, weights then both optimizer slots
  local p
  for p in "" optimizer/m/ optimizer/v/; do sed "s|^|$p|" "$1"; done
}

cat >"$WORK/mlp.want" <<'EOF'
dense/kernel F32 [784, 256]
dense/bias F32 [256]
dense_1/kernel F32 [256, 128]
dense_1/bias F32 [128]
dense_2/kernel F32 [128, 10]
dense_2/bias F32 [10]
EOF
cat >"$WORK/cnn2.want" <<'EOF'
conv2d/kernel F32 [32, 3, 3, 1]
conv2d/bias F32 [32]
conv2d_1/kernel F32 [64, 3, 3, 32]
conv2d_1/bias F32 [64]
dense/kernel F32 [3136, 64]
dense/bias F32 [64]
dense_1/kernel F32 [64, 10]
dense_1/bias F32 [10]
EOF

for model in mlp cnn2; do
  read -r path sum < <("$TOOL" "$WORK/$model" 120 "$model" 7 "$WORK/$model.raw") ||
    fail "$model: checkpoint_tool failed"
  [ "$(basename "$path")" = ckpt-000000000120.safetensors ] || fail "$model: file named $path"
  got=$("$PY" "$READER" "$path" --checksum) || fail "$model: the reader failed"
  [ "$got" = "$sum" ] || fail "$model: reader's weights checksum $got, the vector's is $sum"
  diff <(expect_list "$WORK/$model.want") <("$PY" "$READER" "$path" --list) >&2 ||
    fail "$model: tensor names or shapes differ from the expected ones"
  [ "$("$PY" "$READER" "$path" --meta version)" = 120 ] || fail "$model: metadata version"
  [ "$("$PY" "$READER" "$path" --meta format)" = pstrain-checkpoint ] || fail "$model: metadata format"
  # Values: each prefix's tensors, concatenated in data order, are the vector written.
  "$PY" - "$READER" "$path" "$WORK/$model.raw" <<'EOF' || fail "$model: values differ"
import os, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import read_safetensors as rs
meta, tensors = rs.read(sys.argv[2])
def joined(pred):
    return b"".join(t[3] for t in tensors if pred(t[0]))
for ext, pred in (("w", lambda n: not n.startswith("optimizer/")),
                  ("m", lambda n: n.startswith("optimizer/m/")),
                  ("v", lambda n: n.startswith("optimizer/v/"))):
    with open(sys.argv[3] + "." + ext, "rb") as f:
        want = f.read()
    assert joined(pred) == want, "vector %s differs" % ext
with open(sys.argv[2], "rb") as f:
    n = int.from_bytes(f.read(8), "little")
assert n % 8 == 0 and len(meta["model_fingerprint"]) == 16 and meta["model_spec"].startswith("input ")
EOF
  pass "$model: names, shapes, values, metadata and checksum $sum read back"
  passed=$((passed + 1))
done

# Export: the mlp checkpoint's weights as safetensors and as npz.
ck="$WORK/mlp/ckpt-000000000120.safetensors"
sum=$("$PY" "$READER" "$ck" --checksum)
"$LAUNCHER_BIN" export "$ck" --format safetensors --out "$WORK/w.safetensors" >/dev/null ||
  fail "export to safetensors failed"
diff "$WORK/mlp.want" <("$PY" "$READER" "$WORK/w.safetensors" --list) >&2 ||
  fail "the safetensors export holds other tensors than the weights"
[ "$("$PY" "$READER" "$WORK/w.safetensors" --checksum)" = "$sum" ] || fail "exported weights differ"
for key in model_spec model_fingerprint version; do
  want=$("$PY" "$READER" "$ck" --meta "$key") && [ -n "$want" ] || fail "the checkpoint has no $key"
  [ "$("$PY" "$READER" "$WORK/w.safetensors" --meta "$key")" = "$want" ] ||
    fail "the export lost metadata $key"
done
pass "export --format safetensors: the weights and their metadata"
passed=$((passed + 1))

"$LAUNCHER_BIN" export "$ck" --format=npz --out "$WORK/w.npz" >/dev/null || fail "export to npz failed"
"$PY" - "$READER" "$ck" "$WORK/w.npz" <<'EOF' || fail "the npz does not read back equal"
import ast, os, struct, sys, zipfile
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import read_safetensors as rs
_, tensors = rs.read(sys.argv[2])
weights = [t for t in tensors if not t[0].startswith("optimizer/")]
with zipfile.ZipFile(sys.argv[3]) as z:
    assert z.testzip() is None, "bad CRC"
    assert z.namelist() == [t[0] + ".npy" for t in weights], z.namelist()
    for name, _, shape, raw in weights:
        info = z.getinfo(name + ".npy")
        assert info.compress_type == zipfile.ZIP_STORED
        b = z.read(info)
        assert b[:8] == b"\x93NUMPY\x01\x00", "npy magic"
        (hlen,) = struct.unpack_from("<H", b, 8)
        assert (10 + hlen) % 64 == 0 and b[10 + hlen - 1:10 + hlen] == b"\n"
        d = ast.literal_eval(b[10:10 + hlen].decode("latin1"))
        assert d == {"descr": "<f4", "fortran_order": False, "shape": tuple(shape)}, d
        assert b[10 + hlen:] == raw, name
try:
    import numpy
except ImportError:
    sys.exit(0)
with numpy.load(sys.argv[3]) as npz:
    for name, _, shape, raw in weights:
        assert npz[name].dtype == numpy.float32 and list(npz[name].shape) == shape
        assert npz[name].tobytes() == raw, name
EOF
pass "export --format npz: zipfile and the .npy headers read the weights back"
passed=$((passed + 1))

# --out's default is the checkpoint's name with the new extension, in the current directory;
# a safetensors export beside the checkpoint would replace it, and is refused.
(cd "$WORK" && "$LAUNCHER_BIN" export "$ck" --format npz >/dev/null) || fail "export with the default --out"
[ -s "$WORK/ckpt-000000000120.npz" ] || fail "no ckpt-000000000120.npz in the current directory"
rc=0
(cd "$WORK/mlp" && "$LAUNCHER_BIN" export ckpt-000000000120.safetensors 2>"$WORK/err") || rc=$?
[ "$rc" -eq 2 ] && grep -q "replace the checkpoint" "$WORK/err" || fail "exporting over the checkpoint: rc $rc"
"$PY" "$READER" "$ck" --checksum >/dev/null || fail "the checkpoint was harmed"

# Bad input: one line on stderr and a non-zero exit (2 for usage, 1 for I/O).
head -c 4000 "$ck" >"$WORK/trunc.safetensors"
cp "$ck" "$WORK/flip.safetensors"
printf '\x7f' | dd of="$WORK/flip.safetensors" bs=1 seek=300000 conv=notrunc status=none
check_refused() { # WANT_RC PATTERN ARGS...
  local want=$1 pattern=$2 rc=0
  shift 2
  "$LAUNCHER_BIN" export "$@" >"$WORK/out" 2>"$WORK/err" || rc=$?
  [ "$rc" -eq "$want" ] || fail "export $*: exit $rc, want $want"
  [ "$(wc -l <"$WORK/err")" -eq 1 ] || fail "export $*: want one line on stderr, got: $(cat "$WORK/err")"
  grep -q "$pattern" "$WORK/err" || fail "export $*: no '$pattern' in: $(cat "$WORK/err")"
}
check_refused 1 "truncated" "$WORK/trunc.safetensors" --out "$WORK/x.npz"
check_refused 1 "checksum mismatch" "$WORK/flip.safetensors" --format npz --out "$WORK/x.npz"
check_refused 1 "cannot open" "$WORK/missing.safetensors" --out "$WORK/x.npz"
check_refused 2 "unknown format" "$ck" --format onnx --out "$WORK/x.onnx"
check_refused 1 "cannot create" "$ck" --format npz --out "$WORK/no/such/dir/x.npz"
check_refused 2 "unknown option" "$ck" --bogus
[ ! -e "$WORK/x.npz" ] || fail "a refused export left an output file"
ls -A "$WORK" | grep -q '\.tmp\.' && fail "a temporary file was left behind"
pass "bad input refused with one line: $(head -c 100 "$WORK/err")"
passed=$((passed + 1))
echo "$passed passed, 0 failed"
