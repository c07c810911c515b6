#!/usr/bin/env python3
"""sparse_cmp.py A B: exit 0 if files A and B have the same size and bytes,
1 (with a line saying where) if not, 2 on an error.  Like cmp -s, but what
is a hole in both files (SEEK_DATA/SEEK_HOLE) is not read: comparing the
raw images of multi-GiB sparse disks costs what their data costs."""
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


def main():
    try:
        fa, fb = (os.open(p, os.O_RDONLY) for p in sys.argv[1:3])
    except (OSError, ValueError) as e:
        print("sparse_cmp: %s" % e)
        return 2
    sa, sb = os.fstat(fa).st_size, os.fstat(fb).st_size
    if sa != sb:
        print("sizes differ: %d / %d" % (sa, sb))
        return 1
    for start, end in sorted(extents(fa, sa) + extents(fb, sb)):
        off = start
        while off < end:
            n = min(end - off, 1 << 20)
            if os.pread(fa, n, off) != os.pread(fb, n, off):
                print("differ in [%d, %d)" % (off, off + n))
                return 1
            off += n
    return 0


sys.exit(main())
