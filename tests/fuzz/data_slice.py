#!/usr/bin/python3
"""The first TRAIN training and TEST test samples of a Fashion-MNIST directory, as a new one:
plain IDX files for training, gzip'd for the test set, so that both read paths run.

    data_slice.py SRC_DIR DST_DIR TRAIN TEST
"""
import gzip
import struct
import sys

src, dst, n_train, n_test = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for split, n, gz in (("train", n_train, False), ("t10k", n_test, True)):
    for kind, dims in (("images-idx3", 3), ("labels-idx1", 1)):
        raw = gzip.open(f"{src}/{split}-{kind}-ubyte.gz").read()
        head = list(struct.unpack(">%dI" % (1 + dims), raw[:4 * (1 + dims)]))
        per = 1
        for d in head[2:]:
            per *= d
        head[1] = n
        body = raw[4 * (1 + dims):4 * (1 + dims) + n * per]
        out = struct.pack(">%dI" % (1 + dims), *head) + body
        name = f"{dst}/{split}-{kind}-ubyte"
        if gz:
            with gzip.open(name + ".gz", "wb", compresslevel=1) as f:
                f.write(out)
        else:
            with open(name, "wb") as f:
                f.write(out)
