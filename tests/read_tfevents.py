#!/usr/bin/python3
"""Reads TensorBoard event files with nothing but the standard library, as TensorBoard's
own reader would see them: every TFRecord's masked CRC32C of the length and of the data is
checked, and the Event / Summary / Summary.Value protobuf messages are decoded by hand from
their field numbers in TensorFlow's event.proto and summary.proto (Event: wall_time=1
double, step=2 int64, file_version=3 string, summary=5; Summary: value=1; Value: tag=1
string, simple_value=2 float).

  read_tfevents.py FILE   prints one JSON object per record:
                          {"wall_time", "step", "file_version"} or {..., "scalars": {tag: v}}
"""
import json
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf, i):
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def fields(buf):
    """(field number, wire type, value) of each field of one message."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(buf, i)
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 2:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wt}")
        yield num, wt, v


def event(buf):
    out = {"step": 0}
    for num, wt, v in fields(buf):
        if num == 1 and wt == 1:
            out["wall_time"] = struct.unpack("<d", v)[0]
        elif num == 2 and wt == 0:
            out["step"] = v - (1 << 64) if v >= 1 << 63 else v
        elif num == 3 and wt == 2:
            out["file_version"] = v.decode()
        elif num == 5 and wt == 2:
            scalars = out.setdefault("scalars", {})
            for vn, vwt, val in fields(v):
                if vn != 1 or vwt != 2:
                    continue
                tag, simple = None, None
                for fn, fwt, fv in fields(val):
                    if fn == 1 and fwt == 2:
                        tag = fv.decode()
                    elif fn == 2 and fwt == 5:
                        simple = struct.unpack("<f", fv)[0]
                if tag is None or simple is None:
                    raise ValueError(f"a summary value without its tag or simple_value: {val!r}")
                scalars[tag] = simple
    return out


def records(path):
    data = open(path, "rb").read()
    i = 0
    while i < len(data):
        if i + 12 > len(data):
            raise ValueError(f"{path}: a truncated record header at byte {i}")
        head = data[i:i + 8]
        (n,) = struct.unpack("<Q", head)
        (hcrc,) = struct.unpack("<I", data[i + 8:i + 12])
        if hcrc != masked(crc32c(head)):
            raise ValueError(f"{path}: bad length CRC at byte {i}")
        body = data[i + 12:i + 12 + n]
        (dcrc,) = struct.unpack("<I", data[i + 12 + n:i + 16 + n])
        if len(body) != n or dcrc != masked(crc32c(body)):
            raise ValueError(f"{path}: bad data CRC at byte {i}")
        yield event(body)
        i += 16 + n


if __name__ == "__main__":
    for rec in records(sys.argv[1]):
        print(json.dumps(rec))
