#!/usr/bin/env python3
"""An independent reader of TensorBoard event files, for the tests: the
TFRecord framing with its masked CRC-32C and the Event protobuf are decoded
by hand (the tensorboard package is not installed here), from the formats'
definitions rather than from trainmon's code.

    tbread.py FILE  ->  one JSON object per event on stdout; exit 1 on any
                        framing, CRC or protobuf error.
"""
import json
import struct
import sys


def crc32c(data):
    # Bit by bit, reflected Castagnoli polynomial: slow and obviously right.
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf, i):
    shift = v = 0
    while True:
        if i >= len(buf):
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i
        if shift > 63:
            raise ValueError("varint too long")


def fields(buf):
    """(field number, wire type, value) for each field of a message."""
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
            raise ValueError("wire type %d" % wt)
        if i > len(buf):
            raise ValueError("field %d runs past the message" % num)
        yield num, wt, v


def event(buf):
    ev = {}
    for num, wt, v in fields(buf):
        if num == 1 and wt == 1:
            ev["wall_time"] = struct.unpack("<d", v)[0]
        elif num == 2 and wt == 0:
            ev["step"] = v - (1 << 64) if v >= 1 << 63 else v
        elif num == 3 and wt == 2:
            ev["file_version"] = v.decode("utf-8")
        elif num == 5 and wt == 2:
            vals = []
            for n2, w2, val in fields(v):
                if n2 != 1 or w2 != 2:
                    raise ValueError("Summary field %d" % n2)
                d = {}
                for n3, w3, x in fields(val):
                    if n3 == 1 and w3 == 2:
                        d["tag"] = x.decode("utf-8")
                    elif n3 == 2 and w3 == 5:
                        d["simple_value"] = struct.unpack("<f", x)[0]
                vals.append(d)
            ev["summary"] = vals
        else:
            raise ValueError("unexpected Event field %d (wire type %d)" % (num, wt))
    return ev


def records(data):
    i = 0
    while i < len(data):
        if len(data) - i < 12:
            raise ValueError("torn record header at %d" % i)
        head = data[i:i + 8]
        (n,) = struct.unpack("<Q", head)
        (hcrc,) = struct.unpack("<I", data[i + 8:i + 12])
        if hcrc != masked(head):
            raise ValueError("bad length CRC at %d" % i)
        body = data[i + 12:i + 12 + n]
        if len(body) != n or len(data) < i + 16 + n:
            raise ValueError("torn record at %d" % i)
        (dcrc,) = struct.unpack("<I", data[i + 12 + n:i + 16 + n])
        if dcrc != masked(body):
            raise ValueError("bad data CRC at %d" % i)
        yield body
        i += 16 + n


def main():
    if masked(b"") != 0xA282EAD8 or crc32c(b"123456789") != 0xE3069283:
        print("tbread: CRC self-check failed", file=sys.stderr)
        return 1
    try:
        for body in records(open(sys.argv[1], "rb").read()):
            print(json.dumps(event(body)))
    except ValueError as e:
        print("tbread: %s: %s" % (sys.argv[1], e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
