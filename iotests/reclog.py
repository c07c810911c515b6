#!/usr/bin/env python3
"""Sum up a recording node's log (block/record.c format): what a command
sent to the file, by kind.

    reclog.py LOG [ALIGN]

prints one line

    writes=N write_bytes=B zeros=N zero_bytes=B unmap_zeros=N discards=N
    discard_bytes=B overlap_bytes=B unaligned=N

overlap_bytes counts the bytes that got both a zero request (or a discard)
and a data write: copy.c invariant 2 says a convert makes none.  unaligned
counts zero and discard requests whose offset or length is not a multiple
of ALIGN (default 1: none).
"""
import struct
import sys

REC_WRITE, REC_ZERO, REC_DISCARD, REC_OPEN = 1, 2, 3, 6
MAY_UNMAP = 1  # BLK_REQ_MAY_UNMAP in the aux of a ZERO entry


def merge(ranges):
    out = []
    for start, end in sorted(ranges):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out


def overlap(a, b):
    total, i, j = 0, 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo < hi:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def main():
    align = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    n = {"writes": 0, "write_bytes": 0, "zeros": 0, "zero_bytes": 0,
         "unmap_zeros": 0, "discards": 0, "discard_bytes": 0, "unaligned": 0}
    data, zero = [], []
    with open(sys.argv[1], "rb") as f:
        if f.read(8) != b"QIMGRLG1":
            sys.exit("reclog.py: not a recording log: " + sys.argv[1])
        f.read(8)
        while True:
            e = f.read(32)
            if not e:
                break
            if len(e) < 32:
                sys.exit("reclog.py: truncated entry")
            kind, _fid, off, length, aux = struct.unpack("<IIQQQ", e)
            if kind in (REC_WRITE, REC_OPEN):
                f.seek(length, 1)
            if kind == REC_WRITE:
                n["writes"] += 1
                n["write_bytes"] += length
                data.append((off, off + length))
            elif kind in (REC_ZERO, REC_DISCARD):
                name = "zero" if kind == REC_ZERO else "discard"
                n[name + "s"] += 1
                n[name + "_bytes"] += length
                if kind == REC_ZERO and aux & MAY_UNMAP:
                    n["unmap_zeros"] += 1
                if off % align or length % align:
                    n["unaligned"] += 1
                zero.append((off, off + length))
    n["overlap_bytes"] = overlap(merge(data), merge(zero))
    keys = ["writes", "write_bytes", "zeros", "zero_bytes", "unmap_zeros",
            "discards", "discard_bytes", "overlap_bytes", "unaligned"]
    print(" ".join("%s=%d" % (k, n[k]) for k in keys))


if __name__ == "__main__":
    main()
