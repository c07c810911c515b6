#!/usr/bin/env python3
"""The crash-state explorer: rebuild a file as a power loss could have left
it, from a log of every write and flush, and judge each state.

Power loss, not kill -9: a crash keeps exactly what a completed flush
covered; of the writes after it, any subset may have reached the disk, in
order, each write possibly torn at 4 KiB pages.  The logs come from qimg's
recording node (record:LOG:FILE, block/record.c) or from QEMU's blklogwrites
driver (dm-log-writes format), the positive control.

A state is judged by qemu-img, the oracle:
  - structure: `qemu-img check` finds no corruption (leaks are fine).  A
    state with the dirty bit set (lazy refcounts, or refcounts in flux during
    a snapshot operation) passes when `check -r all` then leaves it clean;
    and nothing the tables reference ends past the end of the file (DESIGN
    rule 1; qemu-img check does not look: reads there return zeros);
  - contents: every sector reads what it held at the last completed flush,
    or what a write issued after that flush put there (workload model
    below), or what the operation's own rule allows.

Workload model: every guest sector a workload writes carries a 16-byte tag
(op index, guest sector) repeated over the sector, and after each op the
workload writes a marker sector (the op's index).  A marker in the log
proves its op returned; a marker after a flush proves the flush returned;
ops after the newest visible marker + 1 were not issued yet.  A write with
FUA (--fua: aio_write -f, then waited for) whose marker is visible is
durable by itself: its sectors read
it or what a later op put there (the recording node logs it so, and a state
keeps it whole).

Encrypted images (--luks-secret PASS): the checks open the image with the
secret (qemu-img --object secret --image-opts), and the log's writes are
decrypted here -- by a LUKS1 reader of its own (Python's hashlib for PBKDF2
and the anti-forensic merge, the cryptography package's AES), independent
of qimg's and QEMU's -- to find the markers; --no-plaintext fails the run
when any workload tag appears in the log in the clear.

Subcommands (used by iotests/tests/05x-crash-*.sh, through lib.sh):
  workload  write a qimg io / qemu-io script, its tag files and a model
  explore   rebuild states from a log and judge them; prints a summary line
  summary   the totals of the explores of a --summary file
  serve     run the others as requests read from stdin (one python3 a test)
"""
import argparse
import hashlib
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time

SECTOR = 512
PAGE = 4096
_ZERO_BLOCK = bytes(65536)
_ZERO_SECTOR = bytes(SECTOR)
QEMU_IMG = os.environ.get("QEMU_IMG", "qemu-img")

# ---- logs ----

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


# ---- state building ----


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


def cut_points(entries, n, rng):
    """Where to cut: the moment before each flush completes (the most that
    may be lost), the end, and random points; at most n, fixed by rng."""
    flushes = [e.index for e in entries if e.type == W_FLUSH]
    pts = set([len(entries)] + flushes)
    # just after a flush, with one or two writes pending: where the first
    # of two dependent writes may land alone (the refcount blocks of a
    # refcount table growth were found so)
    for f in flushes:
        for k in (2, 3):
            if f + k <= len(entries):
                pts.add(f + k)
    pts = sorted(pts)
    if len(pts) > n // 2:
        pts = sorted(rng.sample(pts, n // 2))
    while len(pts) < n and len(entries) > 0:
        pts.append(rng.randint(1, len(entries)))
    return sorted(pts)[:n]


# ---- tags and the workload model ----

TAG_DATA, TAG_MARK = 1, 2
ZERO = ("zero",)
BACKING = ("backing",)


def tag_sector(kind, op, sector):
    h = struct.pack("<2sBBIQ", b"QC", kind, 0, op, sector)
    return h * (SECTOR // 16)


def parse_sector(sec):
    """('data', op, sector), ('mark', op), ZERO, or None (anything else)."""
    if sec[:2] == b"QC" and sec == sec[:16] * (SECTOR // 16):
        _m, kind, _p, op, sector = struct.unpack_from("<2sBBIQ", sec)
        return ("data", op, sector) if kind == TAG_DATA else ("mark", op, sector)
    if sec.count(0) == len(sec):
        return ZERO
    return None


# ---- encrypted images: a LUKS1 reader of our own ----

class Luks:
    """The master key of a qcow2 image's LUKS header (--luks-secret), and
    sector decryption with it (IVs: the host sector, as qcow2's LUKS).
    AES in XTS or CBC mode, plain/plain64/ESSIV IVs."""

    def __init__(self, image, passphrase):
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
        self.Cipher, self.algorithms, self.modes = Cipher, algorithms, modes
        b = open(image, "rb").read()
        o = struct.unpack(">I", b[100:104])[0]
        while True:
            t, ln = struct.unpack(">II", b[o:o + 8])
            if t == 0x0537be77:
                area = struct.unpack(">Q", b[o + 8:o + 16])[0]
                break
            if t == 0:
                raise ValueError("no LUKS header extension in " + image)
            o += 8 + ((ln + 7) & ~7)
        h = b[area:area + 592]
        name = h[8:40].rstrip(b"\0").decode()
        mode = h[40:72].rstrip(b"\0").decode()
        self.hash = h[72:104].rstrip(b"\0").decode()
        self.key_bytes = struct.unpack(">I", h[108:112])[0]
        digest, mk_salt = h[112:132], h[132:164]
        mk_iters = struct.unpack(">I", h[164:168])[0]
        if name != "aes":
            raise ValueError("cipher %s: the reader has AES only" % name)
        self.mode, iv = mode.split("-", 1)
        self.ivgen, _, ivhash = iv.partition(":")
        pw = passphrase.encode()
        for i in range(8):
            s = h[208 + 48 * i:256 + 48 * i]
            active, iters = struct.unpack(">II", s[:8])
            if active != 0x00ac71f3:
                continue
            salt, key_off, stripes = s[8:40], *struct.unpack(">II", s[40:48])
            self.set_key(hashlib.pbkdf2_hmac(self.hash, pw, salt, iters, self.key_bytes),
                         ivhash)
            n = (self.key_bytes * stripes + SECTOR - 1) // SECTOR * SECTOR
            mat = self.decrypt(b[area + key_off * SECTOR:area + key_off * SECTOR + n], 0)
            mk = self.af_merge(mat, stripes)
            if hashlib.pbkdf2_hmac(self.hash, mk, mk_salt, mk_iters, 20) == digest:
                self.set_key(mk, ivhash)
                return
        raise ValueError("the passphrase opens no key slot of " + image)

    def set_key(self, key, ivhash):
        self.key = key
        if self.ivgen == "essiv":
            salt = hashlib.new(ivhash, key).digest()
            self.essiv = self.Cipher(self.algorithms.AES(salt), self.modes.ECB()).encryptor()

    def af_merge(self, mat, stripes):
        n, d = self.key_bytes, bytearray(self.key_bytes)
        ds = hashlib.new(self.hash).digest_size
        for i in range(stripes - 1):
            d = bytearray(x ^ y for x, y in zip(d, mat[i * n:(i + 1) * n]))
            out = bytearray()
            for j in range(0, n, ds):  # diffuse
                part = d[j:j + ds]
                out += hashlib.new(self.hash, struct.pack(">I", j // ds) + part).digest()[
                    :len(part)]
            d = out
        return bytes(x ^ y for x, y in zip(d, mat[(stripes - 1) * n:stripes * n]))

    def decrypt(self, data, sector):
        out = bytearray()
        for k in range(0, len(data) - len(data) % SECTOR, SECTOR):
            n = sector + k // SECTOR
            iv = struct.pack("<Q", n & (0xffffffff if self.ivgen == "plain" else
                                        0xffffffffffffffff)) + bytes(8)
            if self.ivgen == "essiv":
                iv = self.essiv.update(iv)
            m = self.modes.XTS(iv) if self.mode == "xts" else self.modes.CBC(iv)
            d = self.Cipher(self.algorithms.AES(self.key), m).decryptor()
            out += d.update(data[k:k + SECTOR]) + d.finalize()
        return bytes(out)


def plaintext_tags(entries, image):
    """Workload tags the log holds in the clear (writes to the image file)."""
    found = 0
    for e in entries:
        if e.type == W_WRITE and e.data and os.path.realpath(e.path) == image:
            pos = e.data.find(b"QC")
            while pos >= 0:
                if (e.off + pos) % SECTOR == 0 and parse_sector(
                        e.data[pos:pos + SECTOR]) not in (None, ZERO):
                    found += 1
                pos = e.data.find(b"QC", pos + 1)
    return found


def marker_positions(entries, luks=None, image=None):
    """For each entry index, the newest marker op visible up to it (-1);
    with luks, in the decrypted writes to the image file."""
    newest, out = -1, []
    needle = b"QC" + bytes([TAG_MARK])
    for e in entries:
        if e.type == W_WRITE and e.data:
            data, off = e.data, e.off
            if luks and os.path.realpath(e.path) == image:
                head = -off % SECTOR  # whole sectors only
                data = luks.decrypt(data[head:], (off + head) // SECTOR)
                off += head
            pos = data.find(needle)
            while pos >= 0:
                if (off + pos) % SECTOR == 0:
                    v = parse_sector(data[pos:pos + SECTOR])
                    if v and v[0] == "mark":
                        newest = max(newest, v[1])
                pos = data.find(needle, pos + 1)
        out.append(newest)
    return out


def make_workload(args):
    """A random guest I/O workload as a qemu-io command script: tagged
    writes, zero writes, discards, flushes, each followed by a marker.

    With --aio the tagged writes are qimg io aio_write requests, left in
    flight (up to --aio-depth): the marker after op i is written once op i
    was submitted, not completed, so op i's data may reach the file after
    later markers -- the model allows an unflushed op's data or the old one
    either way.  Every flush, zero write and discard drains first
    (aio_flush), as does a write overlapping one in flight, so the order
    the model applies at a flush is the order the data landed in."""
    rng = random.Random(args.seed)
    size, cs = args.size, args.cluster_size
    ops, lines = [], []
    in_flight = []  # (off, len) of aio writes since the last drain

    def drain():
        if in_flight:
            lines.append("aio_flush")
            in_flight.clear()
    os.makedirs(args.dir, exist_ok=True)
    marker_off = size - SECTOR
    far = [0, size // 3 // cs * cs, size // 2, size - 16 * cs - cs]
    for i in range(args.ops):
        r = rng.random()
        base = rng.choice(far) if args.spread else 0
        span = min(size - SECTOR - base, 64 * cs if args.spread else size - SECTOR)
        if r < 0.12:
            op = {"op": "flush"}
            drain()
            lines.append("flush")
        else:
            if rng.random() < 0.5:
                n = SECTOR * rng.randint(1, max(1, 2 * cs // SECTOR))
            else:
                n = cs * rng.randint(1, 4)
            n = max(SECTOR, min(n, span - SECTOR, args.max_len))
            off = base + SECTOR * rng.randrange(0, max(1, (span - n) // SECTOR))
            if r < 0.26:
                drain()
            if r < 0.2 and args.zero_align:
                # whole aligned units (VMDK's zeroed grains), in the same span
                a = args.zero_align
                n = max(a, n // a * a)
                off = base + a * rng.randrange(0, max(1, (span - n) // a))
            if r < 0.2:
                op = {"op": "zero", "off": off, "len": n, "unmap": rng.random() < 0.5}
                lines.append("write -q -z %s%d %d" % ("-u " if op["unmap"] else "", off, n))
            elif r < 0.26 and args.discard:
                op = {"op": "discard", "off": off, "len": n}
                lines.append("discard -q %d %d" % (off, n))
            else:
                op = {"op": "write", "off": off, "len": n}
                path = os.path.join(args.dir, "t%d" % i)
                with open(path, "wb") as f:
                    for s in range(off // SECTOR, (off + n) // SECTOR):
                        f.write(tag_sector(TAG_DATA, i, s))
                if not args.aio:
                    if args.fua and rng.random() < args.fua:
                        # durable once it returned; qimg io's write -f is
                        # write + flush, aio_write -f hands FUA down
                        op["fua"] = True
                        lines += ["aio_write -q -f -s %s %d %d" % (path, off, n), "aio_flush"]
                    else:
                        lines.append("write -q -s %s %d %d" % (path, off, n))
                else:
                    if len(in_flight) >= args.aio_depth or any(
                            o < off + n and off < o + ln for o, ln in in_flight):
                        drain()
                    lines.append("aio_write -q -s %s %d %d" % (path, off, n))
                    in_flight.append((off, n))
        ops.append(op)
        mpath = os.path.join(args.dir, "m%d" % i)
        with open(mpath, "wb") as f:
            f.write(tag_sector(TAG_MARK, i, marker_off // SECTOR))
        lines.append("write -q -s %s %d %d" % (mpath, marker_off, SECTOR))
    drain()
    lines.append("flush")
    with open(os.path.join(args.dir, "script"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(args.dir, "model.json"), "w") as f:
        json.dump({"size": size, "marker": marker_off, "ops": ops}, f)


class Model:
    """What each sector may read after a crash with newest marker M.  The
    touched sectors fall into segments, runs of sectors that the same ops
    cover: every sector of a segment allows the same values (a data tag
    also names its sector), so the model is worked out per segment."""

    def __init__(self, path, backing_raw=None):
        m = json.load(open(path))
        self.size, self.marker, self.ops = m["size"], m["marker"], m["ops"]
        self.backing = backing_raw
        spans = [(i, op["off"] // SECTOR, (op["off"] + op["len"]) // SECTOR)
                 for i, op in enumerate(self.ops) if "off" in op]
        bounds = sorted(set(x for _i, a, b in spans for x in (a, b)))
        self._digests = {}
        self.segments = []  # (first sector, end sector, indexes of the ops over it)
        for a, b in zip(bounds, bounds[1:]):
            over = [i for i, oa, ob in spans if oa <= a and b <= ob]
            if over:
                self.segments.append((a, b, over))

    def allowed(self, newest_marker):
        """[(first sector, end sector, set of allowed values)] with values
        ('data', op) / ZERO / BACKING, and the initial value (what a sector
        no op touched reads)."""
        last_flush = -1
        for i in range(0, newest_marker + 1):
            if self.ops[i]["op"] == "flush":
                last_flush = i
        issued = min(len(self.ops) - 1, newest_marker + 1)
        init = {BACKING} if self.backing is not None else {ZERO}
        out = []
        for a, b, over in self.segments:
            cur = init  # the value when the last flush completed
            for i in over:
                if i > last_flush:
                    break
                cur = self._vals(i, cur, init)
            vals = set(cur)  # and what any write issued since may have put
            for i in over:
                if last_flush < i <= newest_marker and self.ops[i].get("fua"):
                    vals = {("data", i)}  # returned with FUA: durable
                elif last_flush < i <= issued:
                    vals |= self._vals(i, vals, init)
            out.append((a, b, vals))
        return out, init

    def tag_digest(self, op, a, b):
        """SHA-1 of sectors [a, b) as op's write tagged them (cached: the
        states of one explore ask for the same few)."""
        key = (op, a, b)
        if key not in self._digests:
            self._digests[key] = hashlib.sha1(b"".join(
                tag_sector(TAG_DATA, op, s) for s in range(a, b))).digest()
        return self._digests[key]

    def _vals(self, i, prev, init):
        """What a sector that read one of prev may read after op i."""
        op = self.ops[i]["op"]
        if op == "write":
            return {("data", i)}
        if op == "zero":
            return {ZERO}
        # discard: partial clusters are ignored, whole ones read 0/backing
        return set(prev) | {ZERO} | (init if self.backing is not None else set())


def segment_reads_one(chunk, a, b, ok_vals, model):
    """Whether sectors [a, b) (chunk, maybe short at the disk's end) all
    read one value of ok_vals: the quick way for the usual case (a data
    value compares digests: see Model.tag_digest)."""
    n = (b - a) * SECTOR
    if len(chunk) < n:
        chunk = chunk + bytes(n - len(chunk))
    digest = None
    for v in ok_vals:
        if v == ZERO:
            same = chunk.count(0) == n
        elif v == BACKING:
            same = model.backing is not None and chunk == model.backing[a * SECTOR:b * SECTOR]
        else:
            if digest is None:
                digest = hashlib.sha1(chunk).digest()
            same = digest == model.tag_digest(v[1], a, b)
        if same:
            return True
    return False


def check_contents(raw_path, model, newest_marker, limit=5):
    """Problems (strings) found comparing a raw read of the disk with the
    model; [] when every touched sector is allowed."""
    import mmap
    segments, init = model.allowed(newest_marker)
    bad = []
    backing = model.backing
    with open(raw_path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        disk = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        try:
            for a, b, ok_vals in segments:
                if segment_reads_one(disk[a * SECTOR:b * SECTOR], a, b, ok_vals, model):
                    continue
                for s in range(a, b):  # sector by sector (and the problems)
                    pos = s * SECTOR
                    sec = disk[pos:pos + SECTOR]
                    if len(sec) < SECTOR:
                        sec = sec + bytes(SECTOR - len(sec))
                    v = parse_sector(sec)
                    got = None
                    if v == ZERO:
                        got = ZERO
                        if backing is not None and BACKING in ok_vals and \
                                backing[pos:pos + SECTOR] == sec:
                            got = BACKING
                    elif v and v[0] == "data" and v[2] == s:
                        got = ("data", v[1])
                    elif backing is not None and backing[pos:pos + SECTOR] == sec:
                        got = BACKING
                    if got in ok_vals or (got == ZERO and BACKING in ok_vals and
                                          backing is not None and
                                          not any(backing[pos:pos + SECTOR])):
                        continue
                    bad.append("sector %d (offset %d): read %s, allowed %s" %
                               (s, pos, got if got else repr(sec[:16]),
                                sorted(map(str, ok_vals))[:6]))
                    if len(bad) >= limit:
                        return bad
        finally:
            if size:
                disk.close()
    return bad


# ---- judging ----


def run(cmd, **kw):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)
    return p.returncode, p.stdout.decode(errors="replace")


def is_dirty(path):
    with open(path, "rb") as f:
        h = f.read(80)
    return len(h) >= 80 and struct.unpack_from(">I", h, 4)[0] >= 3 and (h[79] & 1)


def is_qcow2(path):
    with open(path, "rb") as f:
        return f.read(4) == b"QFI\xfb"


def image_args(img, secret=None, fmt="qcow2"):
    """qemu-img's arguments naming an image of format fmt (a qcow2 one with
    its key, if any)."""
    if not secret:
        return ["-f", fmt, img]
    return ["--object", "secret,id=crash0,data=" + secret, "--image-opts",
            "driver=qcow2,file.filename=%s,encrypt.key-secret=crash0" % img]


def judge_structure(img, fmt="qcow2", secret=None):
    """('clean'|'leaks'|'dirty-repaired'|'corrupt'|'no-image'|..., detail,
    the image to read the contents from); formats other than qcow2 are
    crash/formats.py's."""
    if fmt != "qcow2":
        import formats
        return formats.judge(img, fmt)
    return judge_qcow2(img, secret) + (img,)


def judge_qcow2(img, secret=None):
    if not is_qcow2(img):
        return "no-image", ""
    cwd = os.path.dirname(img)  # QEMU opens a relative data file name from here
    rc, out = run([QEMU_IMG, "check"] + image_args(img, secret), cwd=cwd)
    if rc == 0:
        return "clean", out
    if rc == 3:
        return "leaks", out
    if is_dirty(img):
        tmp = img + ".repair"
        shutil.copyfile(img, tmp)
        rc2, out2 = run([QEMU_IMG, "check", "-q", "-r", "all"] + image_args(tmp, secret),
                        cwd=cwd)
        rc3, out3 = run([QEMU_IMG, "check"] + image_args(tmp, secret), cwd=cwd)
        os.unlink(tmp)
        if rc3 == 0:
            return "dirty-repaired", out
        return "corrupt", "dirty image not repaired by check -r all:\n" + out + out3
    return "corrupt", out


def check_inside_file(img, fmt="qcow2"):
    """DESIGN rule 1: no table, refcount block or data cluster the active
    L1 or the refcount table references reaches past the end of the file
    (grow.c invariant 1: the file is grown, durably, before an L2 entry
    points into the growth).  Compressed clusters and an external data
    file's clusters are not judged.  Other formats: crash/formats.py."""
    if fmt != "qcow2":
        import formats
        return formats.check_inside_file(img, fmt)
    size = os.path.getsize(img)
    with open(img, "rb") as f:
        h = f.read(104)
        version, = struct.unpack_from(">I", h, 4)
        cluster_bits, = struct.unpack_from(">I", h, 20)
        l1_size, = struct.unpack_from(">I", h, 36)
        l1_off, rt_off = struct.unpack_from(">QQ", h, 40)
        rt_clusters, = struct.unpack_from(">I", h, 56)
        incompat = struct.unpack_from(">Q", h, 72)[0] if version >= 3 else 0
        cs = 1 << cluster_bits
        mask = 0x00fffffffffffe00
        ext_l2, data_file = bool(incompat & 16), bool(incompat & 4)
        entry = 16 if ext_l2 else 8
        problems = []

        def inside(what, off, length):
            if off + length > size:
                problems.append("%s at %d ends past the end of the file (%d bytes)"
                                % (what, off, size))

        f.seek(rt_off)
        rt = f.read(rt_clusters * cs)
        for i in range(len(rt) // 8):
            rb = struct.unpack_from(">Q", rt, 8 * i)[0] & ~(cs - 1)
            if rb:
                inside("refcount block %d" % i, rb, cs)
        f.seek(l1_off)
        l1 = f.read(8 * l1_size)
        for i in range(len(l1) // 8):
            l2_off = struct.unpack_from(">Q", l1, 8 * i)[0] & mask
            if not l2_off:
                continue
            inside("L2 table %d" % i, l2_off, cs)
            if data_file:
                continue
            f.seek(l2_off)
            l2 = f.read(cs)
            words = struct.unpack(">%dQ" % (len(l2) // 8), l2[:len(l2) // 8 * 8])[::entry // 8]
            for j, e in enumerate(words):
                if e & mask and not e & (1 << 62):
                    inside("cluster of L2 table %d entry %d" % (i, j), e & mask, cs)
            if len(problems) > 8:
                break
    return problems[:8]


_CTX = {}  # what the state workers share (set before the pool forks)


def judge_state(job):
    """Build and judge state k (cut, its own seed); returns (k, cut, keep,
    verdict name, problems)."""
    k, cut, seed = job
    c = _CTX
    _SNAPS.clear()
    args, entries = c["args"], c["entries"]
    rng = random.Random(seed)
    keep = rng.choice([0.0, 0.3, 0.7, 1.0])
    work = tempfile.mkdtemp(prefix="state-", dir=c["work"])
    sdir = os.path.join(work, "s")
    os.makedirs(sdir)
    build_state(entries, cut, c["bases"], rng, keep, sdir)
    # the same files (and, judged against a model, the same newest marker)
    # get the same verdict: the first state to claim a digest is judged,
    # the others take its verdict (explore)
    key = state_digest(sdir, c["markers"][cut - 1] if c["markers"] and cut > 0 else -1)
    try:
        os.close(os.open(os.path.join(c["work"], "seen-" + key),
                         os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        shutil.rmtree(work, ignore_errors=True)
        return k, cut, keep, None, [], key
    for name, target in c["links"]:
        os.symlink(os.path.realpath(target), os.path.join(sdir, name))
    simg = os.path.join(sdir, os.path.basename(c["image"]))
    verdict, detail, rimg = judge_structure(simg, args.format, args.luks_secret)
    problems = []
    if verdict == "corrupt" and c["base_errors"] is not None:
        errs = set(l for l in detail.splitlines() if "ERROR" in l)
        if errs and errs <= c["base_errors"]:
            verdict = "unrepaired"  # still only what the repair set out to fix
    if verdict == "corrupt":
        lines = [l for l in detail.splitlines()
                 if "ERROR" in l or "Leaked" not in l and l.strip()]
        problems.append("qemu-img check: " + "\n    ".join(lines[:12]))
    elif verdict == "no-image" and not args.allow_no_image:
        problems.append("the file is not a %s image" % args.format)
    if not problems and verdict != "no-image":
        problems += check_inside_file(rimg, args.format)
    model, expect = c["model"], c["expect"]
    if not problems and verdict != "no-image" and (model or expect):
        raw = os.path.join(work, "state.raw")
        rc, out = run([QEMU_IMG, "convert"] + image_args(rimg, args.luks_secret, args.format) +
                      ["-O", "raw", raw], cwd=sdir)
        if rc != 0:
            problems.append("qemu-img convert failed: " + out.strip())
        elif model:
            newest = c["markers"][cut - 1] if cut > 0 else -1
            problems += check_contents(raw, model, newest)
        else:
            problems += check_expected(raw, expect, args.expect_mode)
    if not problems and verdict != "no-image" and args.snapshot_check:
        problems += check_snapshots(simg, args.snapshot_check, work)
    if not problems and verdict != "no-image" and args.bitmap_check:
        problems += check_bitmaps(simg, args.bitmap_check, work)
    if not problems and verdict != "no-image" and args.vmstate_check:
        problems += check_vmstate(simg, args.vmstate_check, work)
    if problems and args.keep_failed:
        shutil.copytree(sdir, os.path.join(args.keep_failed, "state-%d" % k),
                        symlinks=True)
    shutil.rmtree(work, ignore_errors=True)
    return k, cut, keep, "bad" if problems else verdict, problems, key


def state_digest(sdir, marker):
    """SHA-1 of the files of a state (names, sizes, data extents and their
    contents) and marker.  Holes are not read (they would be hashed as
    zeros): two states that differ only in what is a hole hash apart, and
    are both judged."""
    h = hashlib.sha1(b"%d\n" % marker)
    buf = memoryview(buffer(_MIB))
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
                    n = os.preadv(f.fileno(), [buf[:min(b - a, _MIB)]], a)
                    if n <= 0:
                        break
                    h.update(buf[:n])
                    a += n
    return h.hexdigest()


def explore(args):
    import multiprocessing
    t0, cpu0 = time.monotonic(), sum(os.times()[:4])
    entries = load_log(args.log, args.qemu_file)
    rng = random.Random(args.seed)
    bases = {}
    for spec in args.base:
        path, base = spec.split("=", 1)
        bases[os.path.realpath(path)] = open(base, "rb").read() if base else b""
    model, markers, expect = None, None, None
    if args.model:
        backing = open(args.backing_raw, "rb").read() if args.backing_raw else None
        model = Model(args.model, backing)
        luks = None
        if args.luks_secret:
            base = dict(spec.split("=", 1) for spec in args.base).get(args.image)
            luks = Luks(base or args.image, args.luks_secret)
        markers = marker_positions(entries, luks, os.path.realpath(args.image))
    plain = plaintext_tags(entries, os.path.realpath(args.image)) if args.no_plaintext else 0
    if args.expect_raw:
        expect = [open(p, "rb").read() if p != "zero" else None
                  for p in args.expect_raw.split(",")]
    work = tempfile.mkdtemp(prefix="crash-", dir=args.tmpdir)
    _REFS.clear()
    base_errors = None
    if args.base_errors:
        base_errors = set()
        rc, out = run([QEMU_IMG, "check", "-f", "qcow2", args.base_errors],
                      cwd=os.path.dirname(os.path.realpath(args.base_errors)))
        base_errors = set(l for l in out.splitlines() if "ERROR" in l)
    _CTX.update(base_errors=base_errors, args=args, entries=entries, bases=bases, model=model, markers=markers,
                expect=expect, work=work, image=os.path.realpath(args.image),
                links=[l.split("=", 1) for l in args.link])
    jobs = [(k, cut, rng.random()) for k, cut in
            enumerate(cut_points(entries, args.states, rng))]
    # a pool of workers costs ~0.2 s of CPU: worth it for many states only
    workers = min(args.jobs, len(jobs) // 8)
    try:
        if workers > 1:
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                results = pool.map(judge_state, jobs, chunksize=1)
        else:
            results = [judge_state(j) for j in jobs]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    counts, failures = {}, []
    judged = {key: (name, problems) for _k, _c, _p, name, problems, key in results
              if name is not None}
    copies = {}
    for r in results:
        copies[r[5]] = copies.get(r[5], 0) + 1
    for k, cut, keep, name, problems, key in sorted(results):
        if name is None:  # the same as a state judged
            counts[judged[key][0]] = counts.get(judged[key][0], 0) + 1
            continue
        counts[name] = counts.get(name, 0) + 1
        if problems:
            same = " (and %d identical states)" % (copies[key] - 1) if copies[key] > 1 else ""
            failures.append("state %d (cut %d of %d entries, keep %.1f)%s: %s" %
                            (k, cut, len(entries), keep, same, "\n  ".join(problems)))
    if plain:
        failures.insert(0, "%d sectors of the workload's data in the log in the clear" %
                        plain)
    fua = sum(1 for e in entries if e.type == W_WRITE and e.aux & W_AUX_FUA)
    if fua < args.min_fua_writes:
        failures.insert(0, "%d FUA writes in the log, fewer than the %d asked" %
                        (fua, args.min_fua_writes))
    ring, ring_alloc = ring_writes(entries)
    if ring_alloc < args.min_ring_allocs:
        failures.insert(0, "%d allocating writes of the io_uring in the log (%d ring "
                        "writes), fewer than the %d asked: the path under test was "
                        "not taken" % (ring_alloc, ring, args.min_ring_allocs))
    total = sum(counts.values())
    cpu = sum(os.times()[:4]) - cpu0  # this process, its workers and their tools
    print("%s: %d states (%d distinct; %d log entries, %d flushes): %s (%.1f s, cpu %.1f s)" % (
        args.label, total, len(judged), len(entries),
        sum(1 for e in entries if e.type == W_FLUSH),
        ", ".join("%s %d" % kv for kv in sorted(counts.items())), time.monotonic() - t0, cpu))
    if ring:
        print("  %d writes through the io_uring, %d of them allocating" % (ring, ring_alloc))
    if fua:
        print("  %d FUA writes, durable by themselves" % fua)
    for f in failures[:args.show]:
        print("  " + f)
    if args.summary:
        with open(args.summary, "a") as f:
            f.write(json.dumps({"label": args.label, "states": total, "counts": counts,
                                "distinct": len(judged), "bad": len(failures),
                                "control": bool(args.expect_failures)}) + "\n")
    return 1 if failures and not args.expect_failures else 0


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


_MIB = 1 << 20
_ZERO_MIB = bytes(_MIB)
_BUF = {}  # reused read buffers (fresh memory costs page faults; each worker has its own)
_PADDED = [None, None]  # check_expected's refs, zero-padded: (expect, the padded list)

# (bytes.startswith(VIEW, OFFSET) compares without copying, at memcmp speed;
# comparing memoryviews goes byte by byte, ten times slower)


def buffer(n):
    """A bytearray of n bytes, the same one each time (its contents stale)."""
    if n not in _BUF:
        _BUF[n] = bytearray(n)
    return _BUF[n]


def is_zero(view):
    """Whether a bytes-like object holds only zero bytes."""
    view = memoryview(view)
    return all(_ZERO_MIB.startswith(view[pos:pos + _MIB]) for pos in range(0, len(view), _MIB))


def file_equals(path, ref):
    """Whether the file reads ref (bytes), both zero-extended to the longer.
    The holes of the file (SEEK_DATA) are not read: it may be huge and
    sparse.  Reads into one reused buffer."""
    buf = memoryview(buffer(_MIB))
    refv = memoryview(ref)
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        pos = 0
        for a, b in data_extents(f, size) + [(size, size)]:
            if pos < len(ref) and not is_zero(refv[pos:min(a, len(ref))]):
                return False  # a hole where ref has data
            while a < b:
                n = os.preadv(f.fileno(), [buf[:min(b - a, _MIB)]], a)
                if n <= 0:
                    break
                mine = max(0, min(n, len(ref) - a))  # what ref has of it
                if not ref.startswith(buf[:mine], a) or not is_zero(buf[mine:n]):
                    return False
                a += n
            pos = b
        return size >= len(ref) or is_zero(refv[size:])


def check_expected(raw_path, expect, mode):
    """The disk reads one of the expected raw images (mode 'one-of'), or each
    sector reads the same sector of one of them ('per-sector'); 'zero' in the
    list stands for all zeros; shorter images count as zero-padded.  The
    disk may be huge and sparse: only its data extents are read."""
    refs = [e if e is not None else b"" for e in expect]
    if mode == "one-of":
        if any(file_equals(raw_path, r) for r in refs):
            return []
        return ["the disk matches none of the expected contents"]
    limit = max(len(r) for r in refs)
    if _PADDED[0] is not expect:
        _PADDED[:] = [expect, [r + bytes(limit - len(r)) for r in refs]]
    padded = _PADDED[1]
    size = os.path.getsize(raw_path)
    with open(raw_path, "rb", buffering=0) as f:
        for a, b in data_extents(f, size):
            a = max(a, limit)
            while a < b:
                chunk = os.pread(f.fileno(), min(b - a, _MIB), a)
                if not chunk:
                    break
                if not is_zero(chunk):
                    return ["data past the end of every expected contents at %d" % a]
                a += len(chunk)
        head = memoryview(buffer(limit))
        n = os.preadv(f.fileno(), [head], 0)
        head[n:] = bytes(limit - n)  # (a shorter disk reads zeros)
    bad = []
    step = 128 * SECTOR
    for pos in range(0, limit, step):
        if any(r.startswith(head[pos:pos + step], pos) for r in padded):
            continue  # all of it reads one of them
        for s in range(pos, min(limit, pos + step), SECTOR):
            if not any(r.startswith(head[s:s + SECTOR], s) for r in padded):
                bad.append("sector %d reads none of the allowed contents" % (s // SECTOR))
                if len(bad) >= 5:
                    return bad
    return bad


_REFS = {}  # path -> contents of the reference files (cleared by each explore)
_SNAPS = {}  # (image, snapshot name) -> whether it exists (cleared for each state)


def ref_contents(path):
    if path not in _REFS:
        _REFS[path] = open(path, "rb").read()
    return _REFS[path]


def snapshot_exists(img, name):
    """Whether img has a snapshot name (True/False), or an error string.
    Known from an earlier look at this state, or asked: qemu-img snapshot
    -l."""
    if (img, name) not in _SNAPS:
        rc, out = run([QEMU_IMG, "snapshot", "-l", img], cwd=os.path.dirname(img))
        if rc != 0:
            return "qemu-img snapshot -l failed: " + out.strip()
        names = set(line.split()[1] for line in out.splitlines()[2:]
                    if len(line.split()) >= 2)
        _SNAPS[(img, name)] = name in names
    return _SNAPS[(img, name)]


def check_snapshots(img, spec, work):
    """spec: NAME=RAW[,NAME=RAW]: a snapshot that exists in the state must
    read exactly RAW (a snapshot's contents never change); NAME? when it may
    be absent.  qemu-img convert -l reads each (its "Can't find snapshot"
    says absent: the same lookup as qemu-img snapshot -l's list, for names
    that are not a snapshot ID)."""
    bad = []
    for item in spec.split(","):
        name, raw = item.split("=", 1)
        optional = name.endswith("?")
        name = name.rstrip("?")
        out_raw = os.path.join(work, "snap.raw")
        rc, out = run([QEMU_IMG, "convert", "-l", name, "-f", "qcow2", "-O", "raw", img,
                       out_raw])
        _SNAPS[(img, name)] = rc == 0
        if rc != 0 and "Can't find snapshot" in out:
            if not optional:
                bad.append("snapshot %s is missing" % name)
            continue
        if rc != 0:
            bad.append("reading snapshot %s failed: %s" % (name, out.strip()))
            continue
        if not file_equals(out_raw, ref_contents(raw)):
            bad.append("snapshot %s changed" % name)
        os.unlink(out_raw)
    return bad


def dirty_extents(img, name, work):
    """The dirty extents of bitmap name as QEMU sees them (qemu-nbd -B,
    nbdinfo --map): a list of (offset, length), or an error string."""
    sock = os.path.join(work, "bm.sock")
    pidf = os.path.join(work, "bm.pid")
    # --fork: qemu-nbd returns once the socket accepts connections
    errf = os.path.join(work, "bm.err")
    with open(errf, "wb") as err:  # (no pipe the daemon would keep open)
        rc = subprocess.call(["qemu-nbd", "--fork", "--pid-file=" + pidf, "-r", "-f",
                              "qcow2", "-B", name, "-k", sock, img],
                             stdout=subprocess.DEVNULL, stderr=err)
    if rc != 0:
        return "qemu-nbd: " + open(errf, errors="replace").read().strip()
    pid = int(open(pidf).read().strip())
    try:
        rc, out = run(["nbdinfo", "--map=qemu:dirty-bitmap:" + name,
                       "nbd+unix:///?socket=" + sock])
        if rc != 0:
            return "nbdinfo: " + out.strip()
        ext = []
        for line in out.splitlines():
            f = line.split()
            if len(f) >= 3 and f[2] == "1":
                o, l = int(f[0]), int(f[1])
                if ext and ext[-1][0] + ext[-1][1] == o:
                    ext[-1] = (ext[-1][0], ext[-1][1] + l)
                else:
                    ext.append((o, l))
        return ext
    finally:
        stop_daemon(pid)
        for f in (sock, pidf):
            try:
                os.unlink(f)
            except OSError:
                pass


def stop_daemon(pid):
    """Kill a --fork daemon and wait until it is gone or a zombie (pid 1
    reaps it, maybe seconds later; a zombie holds no lock): the next
    qemu-nbd with the same pid file would otherwise find it still locked
    ("Cannot lock pid file"), as CI saw with two bitmaps in one state."""
    try:
        os.kill(pid, 9)
    except OSError:
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            with open("/proc/%d/stat" % pid) as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return
        except OSError:
            return
        time.sleep(0.01)


def check_bitmaps(img, spec, work):
    """spec: NAME=OFF:LEN[+OFF:LEN...][,NAME=...]: a bitmap the state holds
    that is not marked in use must have every byte of those ranges dirty
    (bitmap-store.c invariant 3: never wrong bits)."""
    rc, out = run([QEMU_IMG, "info", "--output=json", "-U", img], cwd=os.path.dirname(img))
    if rc != 0:
        return ["qemu-img info failed: " + out.strip()]
    data = json.loads(out).get("format-specific", {}).get("data", {})
    flags = {b["name"]: b["flags"] for b in data.get("bitmaps", [])}
    bad = []
    for item in spec.split(","):
        name, ranges = item.split("=", 1)
        if name not in flags or "in-use" in flags[name]:
            continue  # absent, or not to be trusted: never wrong
        ext = dirty_extents(img, name, work)
        if isinstance(ext, str):
            bad.append("bitmap %s: %s" % (name, ext))
            continue
        for r in ranges.split("+"):
            off, length = (int(x) for x in r.split(":"))
            covered = any(o <= off and off + length <= o + l for o, l in ext)
            if not covered:
                bad.append("bitmap %s is consistent but misses %d+%d (dirty: %s)"
                           % (name, off, length, ext))
    return bad


def check_vmstate(img, spec, work):
    """spec: NAME=STREAM: if snapshot NAME exists in the state, its VM state
    reads back as STREAM (qimg's reader: qemu-img has no vmstate reader)."""
    name, stream = spec.split("=", 1)
    exists = snapshot_exists(img, name)
    if isinstance(exists, str):
        return [exists]
    if not exists:
        return []
    out_path = os.path.join(work, "vm.bin")
    rc, out = run([os.environ.get("QIMG", "qimg"), "vmstate", "load", img, name,
                   out_path])
    if rc != 0:
        return ["qimg vmstate load failed: " + out.strip()]
    ref = ref_contents(stream)
    same = os.path.getsize(out_path) == len(ref) and file_equals(out_path, ref)
    os.unlink(out_path)
    return [] if same else ["the VM state of snapshot %s differs" % name]


def summary(args):
    """The totals of every explore a summary file holds, one line a group."""
    rows = [json.loads(l) for l in open(args.file)] if os.path.exists(args.file) else []
    groups = [("qimg, judged", lambda x: x["label"].startswith("qimg") and not x["control"]),
              ("qimg, reported only", lambda x: x["label"].startswith("qimg") and x["control"]),
              ("QEMU (positive control)", lambda x: x["label"].startswith("qemu"))]
    for name, pick in groups:
        r = [x for x in rows if pick(x)]
        if r:
            print("%s: %d cases, %d states (%d distinct), %d bad" %
                  (name, len(r), sum(x["states"] for x in r),
                   sum(x.get("distinct", x["states"]) for x in r), sum(x["bad"] for x in r)))
    return 0


def read_requests(f):
    """The requests of serve: each the count of its arguments, then the
    arguments, every one ended by a NUL byte."""
    buf = b""

    def token():
        nonlocal buf
        while b"\0" not in buf:
            more = f.read1(65536)
            if not more:
                return None
            buf += more
        t, buf = buf.split(b"\0", 1)
        return t.decode()
    while True:
        n = token()
        if n is None:
            return
        argv = [token() for _ in range(int(n))]
        if None in argv:
            return
        yield argv


def serve(ap):
    """Run the subcommands read from stdin (read_requests), one at a time,
    and answer each with its exit code on a line of fd 3.  One python3 then
    serves a whole test: its start and this module's imports cost ~0.15 s
    of CPU, and a test runs dozens."""
    import traceback
    os.set_inheritable(3, False)
    reply = os.fdopen(3, "w", buffering=1)
    for argv in read_requests(sys.stdin.buffer):
        try:
            rc = run_command(ap, ap.parse_args(argv))
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
        except Exception:  # noqa: BLE001 -- reported, and the next request runs
            traceback.print_exc()
            rc = 1
        sys.stdout.flush()
        sys.stderr.flush()
        reply.write("%d\n" % rc)
    return 0


def run_command(ap, args):
    if args.cmd == "workload":
        make_workload(args)
        return 0
    if args.cmd == "summary":
        return summary(args)
    if args.cmd == "serve":
        return serve(ap)
    if args.luks_secret and args.format != "qcow2":
        ap.error("--luks-secret is for qcow2 images (encrypt.format=luks) only")
    return explore(args)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("serve", help="run subcommands read from stdin (see serve)")
    sm = sub.add_parser("summary")
    sm.add_argument("file", help="the --summary file of the explores")
    w = sub.add_parser("workload")
    w.add_argument("--dir", required=True)
    w.add_argument("--seed", default="1")
    w.add_argument("--size", type=int, required=True)
    w.add_argument("--cluster-size", type=int, default=65536)
    w.add_argument("--ops", type=int, default=60)
    w.add_argument("--max-len", type=int, default=1 << 20)
    w.add_argument("--spread", action="store_true", help="far apart offsets (L1 growth)")
    w.add_argument("--no-discard", dest="discard", action="store_false")
    w.add_argument("--aio", action="store_true",
                   help="tagged writes as qimg io aio_write, in flight (qimg only)")
    w.add_argument("--aio-depth", type=int, default=8)
    w.add_argument("--fua", type=float, default=0, metavar="P",
                   help="a tagged write (not --aio) has FUA with probability P")
    w.add_argument("--zero-align", type=int, default=0, metavar="BYTES",
                   help="zero writes cover whole BYTES-aligned units (zeroed grains)")
    e = sub.add_parser("explore")
    e.add_argument("--log", required=True)
    e.add_argument("--qemu-file", help="the file a QEMU blklogwrites log recorded")
    e.add_argument("--base", action="append", default=[],
                   help="PATH=COPY: the file's contents before the run (COPY empty: none)")
    e.add_argument("--image", required=True, help="the image file to judge")
    e.add_argument("--format", default="qcow2", choices=["qcow2", "vpc", "vdi", "vhdx", "vmdk"])
    e.add_argument("--link", action="append", default=[],
                   help="NAME=PATH: symlink NAME in each state (backing files)")
    e.add_argument("--model", help="model.json of a workload")
    e.add_argument("--backing-raw", help="raw contents of the backing chain")
    e.add_argument("--expect-raw", help="RAW[,RAW|zero]: allowed contents")
    e.add_argument("--expect-mode", default="one-of", choices=["one-of", "per-sector"])
    e.add_argument("--snapshot-check", help="NAME=RAW[,...]; NAME? when it may be absent")
    e.add_argument("--bitmap-check", help="NAME=OFF:LEN[+...]: a consistent bitmap covers these")
    e.add_argument("--vmstate-check", help="NAME=STREAM: the snapshot's VM state")
    e.add_argument("--base-errors", metavar="IMAGE",
                   help="a repair: states may report the errors IMAGE reports")
    e.add_argument("--allow-no-image", action="store_true",
                   help="a state that is not a qcow2 image yet passes (create)")
    e.add_argument("--states", type=int, default=50)
    e.add_argument("--seed", default="1")
    e.add_argument("--label", default="crash")
    e.add_argument("--summary", help="append a JSON line with the counts")
    e.add_argument("--show", type=int, default=3)
    e.add_argument("--keep-failed", help="copy failing states here")
    e.add_argument("--tmpdir", default=None)
    e.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="at most this many workers (one a 8 states)")
    e.add_argument("--luks-secret", metavar="PASS",
                   help="the image is encrypted (LUKS) with this passphrase")
    e.add_argument("--no-plaintext", action="store_true",
                   help="fail if a workload tag is in the log in the clear")
    e.add_argument("--min-fua-writes", type=int, default=0, metavar="N",
                   help="fail unless the log holds N writes with FUA (record.c)")
    e.add_argument("--min-ring-allocs", type=int, default=0, metavar="N",
                   help="fail unless N writes to fresh ranges came from the io_uring")
    e.add_argument("--expect-failures", action="store_true",
                   help="positive control: report, do not fail")
    return run_command(ap, ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
