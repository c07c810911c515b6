#!/usr/bin/env python3
"""sparse_cmp.py A B: exit 0 if files A and B have the same size and bytes,
1 (with a line saying where) if not, 2 on an error.  Like cmp -s, but what
is a hole in both files (SEEK_DATA/SEEK_HOLE) is not read: comparing the
raw images of multi-GiB sparse disks costs what their data costs.

sparse_cmp.py --pairs FILE: the same comparison for each line "DESC A B"
of FILE (DESC with "_" for spaces), in one process: a line "FAILED: DESC
differs: WHERE" for each pair that differs, then the number of pairs."""
import os
import sys


def extents(fd, size):
    out, off = [], 0
    while off < size:
        try:
            d = os.lseek(fd, off, os.SEEK_DATA)
        except OSError:  # ENXIO: no data after off
            break
        h = os.lseek(fd, d, os.SEEK_HOLE)
        out.append((d, h))
        off = h
    return out


def differ(a, b):
    """None if files a and b have the same size and bytes, else where they
    differ (or why they could not be read)."""
    try:
        fa, fb = os.open(a, os.O_RDONLY), os.open(b, os.O_RDONLY)
    except OSError as e:
        return "sparse_cmp: %s" % e
    try:
        sa, sb = os.fstat(fa).st_size, os.fstat(fb).st_size
        if sa != sb:
            return "sizes differ: %d / %d" % (sa, sb)
        for start, end in sorted(extents(fa, sa) + extents(fb, sb)):
            off = start
            while off < end:
                n = min(end - off, 1 << 20)
                if os.pread(fa, n, off) != os.pread(fb, n, off):
                    return "differ in [%d, %d)" % (off, off + n)
                off += n
        return None
    finally:
        os.close(fa)
        os.close(fb)


def pairs(path):
    n = 0
    with open(path) as f:
        for line in f:
            desc, a, b = line.split()
            n += 1
            d = differ(a, b)
            if d:
                print("FAILED: %s differs: %s" % (desc.replace("_", " "), d))
    print(n)
    return 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--pairs":
        return pairs(sys.argv[2])
    if len(sys.argv) != 3:
        print("usage: sparse_cmp.py A B | --pairs FILE")
        return 2
    d = differ(sys.argv[1], sys.argv[2])
    if d is None:
        return 0
    print(d)
    return 2 if d.startswith("sparse_cmp: ") else 1


if __name__ == "__main__":
    sys.exit(main())
