#!/usr/bin/env python3
"""settle.py [--evict] FILE...: make what SEEK_DATA/SEEK_HOLE answer over
each FILE's unwritten extents independent of the page cache.  By default
it writes their zeroes (they answer data from then on); with --evict it
writes back the file's dirty pages and drops its cached ones (they answer
hole until something reads them again: right before a qemu-img map of a
raw image, which reads none of its data).  The bytes of every file are
unchanged.  Prints nothing; exit 2 on an error (a file that does not exist
is skipped: callers pass globs).

An unwritten extent is space fallocate() reserved (preallocation=falloc,
FALLOC_FL_ZERO_RANGE: a qcow2 downgrade's zeroed clusters) and nothing has
written since.  ext4 (iomap) answers SEEK_DATA over one by the page cache:
a page some read brought in (a convert, readahead around an L2 table)
makes it data, the same page evicted makes it a hole again.  So qemu-img
map and qimg map of the same image, or qemu-img map twice, can say
"zero": true or false for the same allocated cluster, split or merge
entries accordingly, and a human map lists the range or not (iotest 219
shows it).  A written extent answers data and a real hole (no extent)
answers hole whatever is cached: those, and every qcow2-level answer, stay
compared.

FIEMAP (with FIEMAP_FLAG_SYNC, so delayed allocations are decided first)
reads the extent flags from the file system, not from the page cache.
"""
import fcntl
import os
import struct
import sys

FS_IOC_FIEMAP = 0xC020660B
FIEMAP_FLAG_SYNC = 0x1
FIEMAP_EXTENT_LAST = 0x1
FIEMAP_EXTENT_UNWRITTEN = 0x800
HDR = "QQIIII"  # fm_start, fm_length, fm_flags, fm_mapped_extents, fm_extent_count, reserved
EXT = "QQQQQIIII"  # logical, physical, length, reserved64[2], flags, reserved32[3]
BATCH = 256


def extents(fd):
    """The (start, length, flags) of the file's extents, by logical offset
    (FIEMAP_FLAG_SYNC: the file's dirty pages are written back first, so
    delayed allocations are extents too)."""
    out, start = [], 0
    while True:
        req = struct.pack(HDR, start, 2**64 - 1 - start, FIEMAP_FLAG_SYNC, 0, BATCH, 0)
        buf = bytearray(req + bytes(struct.calcsize(EXT) * BATCH))
        fcntl.ioctl(fd, FS_IOC_FIEMAP, buf)
        n = struct.unpack_from(HDR, buf)[3]
        if n == 0:
            return out
        last = False
        for i in range(n):
            off = struct.calcsize(HDR) + i * struct.calcsize(EXT)
            logical, _, length, _, _, flags, _, _, _ = struct.unpack_from(EXT, buf, off)
            out.append((logical, length, flags))
            start = logical + length
            last = bool(flags & FIEMAP_EXTENT_LAST)
        if last:
            return out


def unwritten_extents(fd):
    """The (start, length) of the file's unwritten extents, by logical offset."""
    return [(s, n) for s, n, f in extents(fd) if f & FIEMAP_EXTENT_UNWRITTEN]


def settle(path, evict):
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return
    try:
        if not os.path.isfile(path):
            return
        if evict:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            return
        size = os.fstat(fd).st_size
        zero = bytes(1 << 20)
        for start, length in unwritten_extents(fd):
            # (an extent past EOF, KEEP_SIZE's, reads as nothing: keep it)
            end = min(start + length, size)
            while start < end:
                n = os.pwrite(fd, zero[: min(len(zero), end - start)], start)
                start += n
        os.fsync(fd)
    finally:
        os.close(fd)


def main():
    try:
        args = sys.argv[1:]
        evict = bool(args) and args[0] == "--evict"
        for path in args[evict:]:
            settle(path, evict)
    except OSError as e:
        print(f"settle.py: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
