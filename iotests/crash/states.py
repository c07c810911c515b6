"""The crash-state explorer's power-loss states (crash.py): where to cut a
log (cut_points: around the first flush that covers a new header, before
each flush completes, just after one, at the end, and at random) and the
files a power loss at a cut leaves (build_state): whatever a completed
flush covered, and a FUA write, whole; of the writes after it, a random
subset, in order, some torn at 4 KiB pages.  A state's
files are built in place on disk, sparse (FileState), and hashed
(state_digest) so that identical states are judged once; data_extents and
buffer read such sparse files, for the judges too.
"""
import hashlib
import os

from crashlog import W_AUX_FUA, W_DISCARD, W_FLUSH, W_OPEN, W_TRUNCATE, W_WRITE, W_ZERO

PAGE = 4096
_ZERO_BLOCK = bytes(65536)
MIB = 1 << 20
_BUF = {}  # reused read buffers (fresh memory costs page faults; each worker has its own)


class FileState:
    """One file of a state, built in place on disk (sparse: zeroed ranges
    are holes), so that a state costs the writes it applies, not a copy of
    the whole file in memory."""

    def __init__(self, path, base):
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self.size = len(base)
        os.ftruncate(self.fd, self.size)
        view = memoryview(base)
        for pos in range(0, len(base), 65536):
            chunk = view[pos:pos + 65536]
            if chunk != _ZERO_BLOCK[:len(chunk)]:
                os.pwrite(self.fd, chunk, pos)

    def close(self):
        os.close(self.fd)

    def write(self, off, data):
        os.pwrite(self.fd, data, off)
        self.size = max(self.size, off + len(data))

    def zero(self, a, b):
        """[a, b) reads zeros; the file grows to b if shorter."""
        old = self.size
        if b > old:
            self.truncate(b)
        if a < old:
            punch_hole(self.fd, a, min(b, old) - a)

    def truncate(self, size):
        os.ftruncate(self.fd, size)
        self.size = size


def _libc_fallocate():
    try:
        import ctypes
        import ctypes.util
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        f = libc.fallocate
        f.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
        return f
    except (OSError, AttributeError):
        return None


_FALLOCATE = _libc_fallocate()
_PUNCH = 0x02 | 0x01  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE


def punch_hole(fd, off, length):
    """Zero [off, off+length) of fd without changing its size."""
    if _FALLOCATE is not None and _FALLOCATE(fd, _PUNCH, off, length) == 0:
        return
    for pos in range(off, off + length, 65536):  # no hole punching here
        os.pwrite(fd, _ZERO_BLOCK[:min(65536, off + length - pos)], pos)


def pieces(off, length):
    """[off, off+length) cut at 4 KiB page boundaries."""
    out, pos, end = [], off, off + length
    while pos < end:
        nxt = min(end, (pos // PAGE + 1) * PAGE)
        out.append((pos, nxt))
        pos = nxt
    return out


def apply_entry(fs, e, rng=None, tear=False):
    """Apply e to fs; torn: only a random subset of its pages."""
    if e.type == W_TRUNCATE:
        fs.truncate(e.off)
        return
    if e.type not in (W_WRITE, W_ZERO, W_DISCARD):
        return
    if tear:
        parts = pieces(e.off, e.len)
        if len(parts) > 1:
            parts = [p for p in parts if rng.random() < 0.5] or [rng.choice(parts)]
        runs = []  # adjacent pages kept merge into one run
        for a, b in parts:
            if runs and runs[-1][1] == a:
                runs[-1][1] = b
            else:
                runs.append([a, b])
    else:
        runs = [(e.off, e.off + e.len)] if e.len > 0 else []
    for a, b in runs:
        if e.type == W_WRITE:
            fs.write(a, e.data[a - e.off:b - e.off])
        elif e.type == W_ZERO:
            fs.zero(a, b)  # zeroed (and allocated: may extend)
        elif a < fs.size:
            fs.zero(a, min(b, fs.size))  # punched: keeps the size



def durable_cover(entries, cut):
    """path -> number of log entries the last flush before cut covered."""
    cover = {}
    for e in entries[:cut]:
        if e.type == W_FLUSH:
            cover[e.path] = max(cover.get(e.path, 0), e.aux)
    return cover


def build_state(entries, cut, bases, rng, keep_prob, sdir):
    """Write into sdir the files (by base name) a power loss at cut leaves."""
    files = {}

    def state_file(path):
        if path not in files:
            files[path] = FileState(os.path.join(sdir, os.path.basename(path)),
                                    bases.get(path, b""))
        return files[path]
    for p in bases:
        state_file(p)
    cover = durable_cover(entries, cut)
    try:
        for e in entries[:cut]:
            if e.type in (W_FLUSH, W_OPEN):
                continue
            fs = state_file(e.path)
            if e.index < cover.get(e.path, 0) or (e.type == W_WRITE and e.aux & W_AUX_FUA):
                apply_entry(fs, e)  # durable: a flush covered it, or FUA
            elif rng.random() < keep_prob:
                apply_entry(fs, e, rng, tear=rng.random() < 0.3)
    finally:
        for fs in files.values():
            fs.close()


def header_cuts(entries):
    """The cuts around each new header of a file: a write at offset 0
    that does not begin with zeros (a format's magic: every format judged
    here keeps its header there), and the first flush that covers it --
    the cut just before that flush completes (the header may or may not
    have reached the disk, the writes since the flush before it neither)
    and just after (the header durable).  A creation's states are no image
    until then (qcow2/create.c invariant 5): without these cuts a few
    states fall before it.  Newest header first."""
    out, waiting = [], []
    for e in entries:
        if e.type == W_WRITE and e.off == 0 and e.len >= 4 and e.data[:4] != bytes(4):
            waiting.append(e)
        elif e.type == W_FLUSH and waiting:
            done = [w for w in waiting if w.path == e.path and w.index < e.aux]
            if done:
                out.append((e.index, e.index + 1))
                waiting = [w for w in waiting if w not in done]
    return [c for pair in reversed(out) for c in pair]


def cut_points(entries, n, rng):
    """Where to cut: around each new header (header_cuts, at most half of
    them), the moment before each flush completes (the most that may be
    lost), the end, and random points; at most n, fixed by rng."""
    must = []
    for c in header_cuts(entries):
        if len(must) < max(n // 2, 1) and c <= len(entries) and c not in must:
            must.append(c)
    flushes = [e.index for e in entries if e.type == W_FLUSH]
    pts = set([len(entries)] + flushes)
    # just after a flush, with one or two writes pending: where the first
    # of two dependent writes may land alone (the refcount blocks of a
    # refcount table growth were found so)
    for f in flushes:
        for k in (2, 3):
            if f + k <= len(entries):
                pts.add(f + k)
    pts = sorted(pts - set(must))
    room = max(n // 2 - len(must), 0)
    if len(pts) > room:
        pts = sorted(rng.sample(pts, room))
    pts += must
    while len(pts) < n and len(entries) > 0:
        pts.append(rng.randint(1, len(entries)))
    return sorted(pts)[:n]


def state_digest(sdir, marker):
    """SHA-1 of the files of a state (names, sizes, data extents and their
    contents) and marker.  Holes are not read (they would be hashed as
    zeros): two states that differ only in what is a hole hash apart, and
    are both judged."""
    h = hashlib.sha1(b"%d\n" % marker)
    buf = memoryview(buffer(MIB))
    for name in sorted(os.listdir(sdir)):
        path = os.path.join(sdir, name)
        if os.path.islink(path):
            continue  # the same in every state
        with open(path, "rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            h.update(b"%s %d\n" % (name.encode(), size))
            for a, b in data_extents(f, size):
                h.update(b"%d %d\n" % (a, b))
                while a < b:
                    n = os.preadv(f.fileno(), [buf[:min(b - a, MIB)]], a)
                    if n <= 0:
                        break
                    h.update(buf[:n])
                    a += n
    return h.hexdigest()


def data_extents(f, size):
    """(start, end) of the non-hole parts of an open file (SEEK_DATA)."""
    pos, out = 0, []
    while pos < size:
        try:
            start = os.lseek(f.fileno(), pos, os.SEEK_DATA)
        except OSError:
            break
        end = os.lseek(f.fileno(), start, os.SEEK_HOLE)
        out.append((start, min(end, size)))
        pos = end
    return out


def buffer(n):
    """A bytearray of n bytes, the same one each time (its contents stale)."""
    if n not in _BUF:
        _BUF[n] = bytearray(n)
    return _BUF[n]
