#!/usr/bin/env python3
"""ofd_locks.py FILE: the bytes of FILE that other open file descriptions
hold record locks on (OFD or POSIX, read or write), ascending and
space-separated: one number per locked byte, "A-B" for a locked run of more
than 64 bytes, "A-EOF" for one that runs to the end of the file; nothing
when none is.  Exit 2 on an error.

The kernel answers each question (F_OFD_GETLK with a write lock, which
every other description's lock conflicts with) in one look under its lock
of the file, so the answer is what was held at one moment.  /proc/locks is
not: it lists every lock of the machine, a page per read(), and each read()
walks the list again to where the last one stopped -- a lock another
process takes or drops meanwhile on any file moves that place, and the
reader sees a lock twice or misses one (a lone holder of 100 201 203 read
"100 100 201 201 203"; iotests/tests/216).  What it cannot tell: how many
descriptions hold a byte (two holders of byte 100 read as one 100).
It takes no lock itself: a process opening FILE meanwhile is not disturbed.
"""
import fcntl
import os
import struct
import sys

FLOCK = "hhqqi4x"  # struct flock, LP64 Linux: type, whence, start, len, pid


def first_lock(fd, start, end):
    """A lock held on [start, end) (end None: to EOF), as (a, b), b None
    meaning EOF, or None."""
    length = 0 if end is None else end - start
    arg = struct.pack(FLOCK, fcntl.F_WRLCK, os.SEEK_SET, start, length, 0)
    typ, _, a, n, _ = struct.unpack(FLOCK, fcntl.fcntl(fd, fcntl.F_OFD_GETLK, arg))
    if typ == fcntl.F_UNLCK:
        return None
    return a, (None if n == 0 else a + n)


def locked_runs(fd):
    """The union of the locks held on the file, as sorted (a, b) runs."""
    runs, todo = [], [(0, None)]
    while todo:
        s, e = todo.pop()
        lock = first_lock(fd, s, e)
        if lock is None:
            continue
        a, b = lock
        a = max(a, s)
        b = e if b is None else (b if e is None else min(b, e))
        runs.append((a, b))
        if s < a:
            todo.append((s, a))
        if b is not None and (e is None or b < e):
            todo.append((b, e))
    return sorted(runs, key=lambda r: r[0])


def main():
    if len(sys.argv) != 2:
        print("usage: ofd_locks.py FILE", file=sys.stderr)
        return 2
    try:
        fd = os.open(sys.argv[1], os.O_RDONLY)
        runs = locked_runs(fd)
    except OSError as e:
        print("ofd_locks.py: %s" % e, file=sys.stderr)
        return 2
    out = []
    for a, b in runs:
        if b is None:
            out.append("%d-EOF" % a)
        elif b - a > 64:
            out.append("%d-%d" % (a, b - 1))
        else:
            out.extend(str(x) for x in range(a, b))
    print(" ".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
