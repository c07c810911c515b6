"""The crash-state explorer's guest workload and its model (crash.py): a
random workload as a qimg io / qemu-io script (make_workload), what each
sector may read after a crash (Model), and the check of a state's disk
against it (check_contents).

Workload model: every guest sector a workload writes carries a 16-byte tag
(op index, guest sector) repeated over the sector, and after each op the
workload writes a marker sector (the op's index).  A marker in the log
proves its op returned; a marker after a flush proves the flush returned;
ops after the newest visible marker + 1 were not issued yet.  A write with
FUA (--fua: aio_write -f, then waited for) whose marker is visible is
durable by itself: its sectors read
it or what a later op put there (the recording node logs it so, and a state
keeps it whole).

The markers of an encrypted image's log are found in its writes decrypted
(marker_positions, with luks.py's reader); plaintext_tags counts the
workload's tags a log holds in the clear (explore --no-plaintext).
"""
import hashlib
import json
import os
import random
import struct

from crashlog import W_WRITE

SECTOR = 512

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
        if backing_raw is not None:  # a shorter backing file reads zeros past its end
            backing_raw = backing_raw[:self.size] + bytes(max(0, self.size - len(backing_raw)))
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

