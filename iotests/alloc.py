#!/usr/bin/env python3
"""alloc.py [--unit N] FILE: the space FILE's data holds on disk, in bytes:
the sum of its extents (FIEMAP after a sync, settle.py's reader), written
or unwritten.  With --unit N: how many N-byte pieces of the file (N-aligned
from offset 0) an extent touches.  Exit 2 on an error.

Not st_blocks (du, stat %b), which a test comparing allocation cannot rely
on: it also counts the file system's own blocks (ext4's extent-tree blocks,
which come and go as extents split or merge: a write into an unwritten
extent splits it, a neighbouring write may merge two), and before
writeback, delayed allocation's reservations.  An extent is exactly the
file's bytes that have space: what iotests 149 and 210 mean by "given
back" and "allocated".
"""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in iotests/
from settle import extents  # noqa: E402


def main():
    args = sys.argv[1:]
    unit = 0
    try:
        if len(args) == 3 and args[0] == "--unit":
            unit = int(args[1])
            args = args[2:]
        if len(args) != 1 or unit < 0:
            print("usage: alloc.py [--unit N] FILE", file=sys.stderr)
            return 2
        fd = os.open(args[0], os.O_RDONLY)
        try:
            ext = extents(fd)
        finally:
            os.close(fd)
    except (OSError, ValueError) as e:
        print(f"alloc.py: {e}", file=sys.stderr)
        return 2
    if not unit:
        print(sum(n for _, n, _ in ext))
        return 0
    pieces = set()
    for start, n, _ in ext:
        pieces.update(range(start // unit, (start + n - 1) // unit + 1))
    print(len(pieces))
    return 0


if __name__ == "__main__":
    sys.exit(main())
