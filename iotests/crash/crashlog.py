"""The crash-state explorer's recording-log reader (crash.py): the entries
of a log of every write and flush of an operation, from qimg's recording
node (record:LOG:FILE, block/record.c) or from QEMU's blklogwrites driver
(dm-log-writes format), the positive control; and ring_writes, which of
its writes the io_uring made (explore --min-ring-allocs).
"""
import os
import struct

W_WRITE, W_ZERO, W_DISCARD, W_TRUNCATE, W_FLUSH, W_OPEN = 1, 2, 3, 4, 5, 6
W_AUX_RING = 1  # a WRITE's aux: the io_uring wrote it (block/record.c invariant 5)
W_AUX_FUA = 2  # a WRITE's aux: durable when it completed, alone (record.c invariant 6)
DM_MAGIC = 0x6A736677736872
DM_FLUSH, DM_FUA, DM_DISCARD, DM_MARK = 1, 2, 4, 8


class Entry:
    __slots__ = ("type", "path", "off", "len", "aux", "data", "index")

    def __init__(self, type_, path, off, length, aux=0, data=None):
        self.type, self.path, self.off, self.len = type_, path, off, length
        self.aux, self.data, self.index = aux, data, 0


def load_log(path, qemu_file=None):
    """Entries of a qimg record log, or of a QEMU blklogwrites log (then
    qemu_file names the file it logged)."""
    raw = open(path, "rb").read()
    entries = []
    if raw[:8] == b"QIMGRLG1":
        names = {}
        pos = 16
        starts = []  # byte position of each entry (a flush's aux is one)
        while pos + 32 <= len(raw):
            t, fid, off, n, aux = struct.unpack_from("<IIQQQ", raw, pos)
            here = pos
            pos += 32
            data = None
            if t in (W_WRITE, W_OPEN):
                data = raw[pos:pos + n]
                if len(data) < n:
                    break  # cut short (the recorder died mid-entry)
                pos += n
            if t == W_OPEN:
                # ids restart with each process or log session: the open
                # entry (re)names them
                names[fid] = os.path.realpath(data.decode())
                entries.append(Entry(W_OPEN, names[fid], off, 0))
                starts.append(here)
                continue
            if t == W_FLUSH:
                # entries that began below aux were complete when it began
                aux = sum(1 for p0 in starts if p0 < aux)
            entries.append(Entry(t, names.get(fid, "?%d" % fid), off, n, aux, data))
            starts.append(here)
    elif len(raw) == 0:
        pass  # nothing was logged (an operation with nothing to write)
    else:
        magic, _ver, nr, ss = struct.unpack_from("<QQQI", raw, 0)
        if magic != DM_MAGIC:
            raise SystemExit("%s: not a record log" % path)
        qpath = os.path.realpath(qemu_file)
        pos = ss
        while pos + 32 <= len(raw):
            sector, nsec, flags, _dlen = struct.unpack_from("<QQQQ", raw, pos)
            pos += ss
            if flags & DM_FLUSH:
                entries.append(Entry(W_FLUSH, qpath, 0, 0, aux=-1))
                continue
            if flags & DM_DISCARD:
                entries.append(Entry(W_DISCARD, qpath, sector * ss, nsec * ss))
                continue
            if flags & DM_MARK:
                pos += nsec * ss
                continue
            if nsec == 0:
                if sector == 0 and flags == 0 and raw[pos - ss:pos] == bytes(ss):
                    break  # zero-filled tail: end of the log
                continue
            data = raw[pos:pos + nsec * ss]
            pos += nsec * ss
            if len(data) < nsec * ss:
                break
            entries.append(Entry(W_WRITE, qpath, sector * ss, nsec * ss, data=data))
    for i, e in enumerate(entries):
        e.index = i
        if e.type == W_FLUSH and e.aux == -1:
            e.aux = i  # blklogwrites logs a flush after it completed
    return entries



def ring_writes(entries):
    """(ring writes, allocating ones): WRITE entries the io_uring made
    (W_AUX_RING), and of them those that were the first WRITE to touch
    any byte of their range in their file -- data landing in clusters
    allocated for it (a rewrite in place follows an earlier write)."""
    import bisect
    written = {}  # path -> sorted, disjoint [start, end) lists
    ring = alloc = 0
    for e in entries:
        if e.type != W_WRITE or e.len == 0:
            continue
        starts, ends = written.setdefault(e.path, ([], []))
        a, b = e.off, e.off + e.len
        i = bisect.bisect_right(ends, a)  # first interval ending after a
        j = bisect.bisect_left(starts, b)  # intervals from i to j overlap
        if e.aux & W_AUX_RING:
            ring += 1
            alloc += i == j
        if i < j:
            a, b = min(a, starts[i]), max(b, ends[j - 1])
        starts[i:j], ends[i:j] = [a], [b]
    return ring, alloc

