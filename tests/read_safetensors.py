#!/usr/bin/python3
"""A stdlib-only reader of safetensors files (an 8-byte little-endian header length N, N bytes
of JSON, then the data section), for checking pstrain's checkpoints without the `safetensors`
package (Debian 12 has none). As a library: read(path) and fnv1a64(chunks). As a command:

  read_safetensors.py FILE --list        name, dtype and shape of each tensor, in data order
  read_safetensors.py FILE --meta KEY    one __metadata__ value
  read_safetensors.py FILE --checksum    FNV-1a 64 (16 hex digits) over the tensors not under
                                         optimizer/, in data order: the ps's weights checksum

When the `safetensors` module is importable, the file is also loaded with it and must agree."""
import json
import struct
import sys


def read(path):
    """(metadata dict, [(name, dtype, shape, raw bytes)] in data order)."""
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack_from("<Q", buf, 0)
    header = json.loads(buf[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    data = buf[8 + n:]
    items = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"])
    return meta, [(k, v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
                  for k, v in items]


def fnv1a64(chunks):
    # pstrain's offset basis (common/fnv.h's PST_FNV1A64_BASIS), which the ps's weights checksum and
    # the checkpoint's data_fnv1a64 use: 1469598103934665603, not FNV's 14695981039346656037.
    h = 1469598103934665603
    for chunk in chunks:
        for b in chunk:
            h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def crosscheck(path, tensors):
    """The real safetensors package, where installed, must read the same tensors."""
    try:
        from safetensors.numpy import load_file
    except ImportError:
        return
    loaded = load_file(path)
    assert sorted(loaded) == sorted(t[0] for t in tensors), "safetensors sees other names"
    for name, _, shape, raw in tensors:
        assert list(loaded[name].shape) == shape and loaded[name].tobytes() == raw, name


def main(argv):
    if len(argv) < 3 or argv[2] not in ("--list", "--meta", "--checksum"):
        sys.exit("usage: read_safetensors.py FILE --list | --meta KEY | --checksum")
    meta, tensors = read(argv[1])
    if argv[2] == "--meta":
        print(meta[argv[3]])
        return
    crosscheck(argv[1], tensors)
    if argv[2] == "--list":
        for name, dtype, shape, _ in tensors:
            print(name, dtype, json.dumps(shape))
    else:
        print("%016x" % fnv1a64(t[3] for t in tensors if not t[0].startswith("optimizer/")))


if __name__ == "__main__":
    main(sys.argv)
