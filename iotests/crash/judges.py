"""The crash-state explorer's judges of one state (crash.py).

A state is judged by qemu-img, the oracle:
  - structure: `qemu-img check` finds no corruption (leaks are fine).  A
    state with the dirty bit set (lazy refcounts, or refcounts in flux during
    a snapshot operation) passes when `check -r all` then leaves it clean;
    and nothing the tables reference ends past the end of the file (DESIGN
    rule 1; qemu-img check does not look: reads there return zeros);
  - contents: every sector reads what it held at the last completed flush,
    or what a write issued after that flush put there (workload.py's
    model), or what the operation's own rule allows.

The structure: judge_structure and check_inside_file (qcow2 here, the other
formats in formats.py).  The contents: workload.py's check_contents against
a workload's model, or check_expected against the contents a case allows.
Then what a case asks besides: its snapshots still read what they held
(check_snapshots), its persistent bitmaps cover its writes
(check_bitmaps), a snapshot's VM state reads back (check_vmstate).
"""
import json
import os
import shutil
import struct
import subprocess
import time

from formats import run
from states import MIB, buffer, data_extents
from workload import SECTOR

QEMU_IMG = os.environ.get("QEMU_IMG", "qemu-img")
_ZERO_MIB = bytes(MIB)


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


# (bytes.startswith(VIEW, OFFSET) compares without copying, at memcmp speed;
# comparing memoryviews goes byte by byte, ten times slower)


def is_zero(view):
    """Whether a bytes-like object holds only zero bytes."""
    view = memoryview(view)
    return all(_ZERO_MIB.startswith(view[pos:pos + MIB]) for pos in range(0, len(view), MIB))


def file_equals(path, ref):
    """Whether the file reads ref (bytes), both zero-extended to the longer.
    The holes of the file (SEEK_DATA) are not read: it may be huge and
    sparse.  Reads into one reused buffer."""
    buf = memoryview(buffer(MIB))
    refv = memoryview(ref)
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        pos = 0
        for a, b in data_extents(f, size) + [(size, size)]:
            if pos < len(ref) and not is_zero(refv[pos:min(a, len(ref))]):
                return False  # a hole where ref has data
            while a < b:
                n = os.preadv(f.fileno(), [buf[:min(b - a, MIB)]], a)
                if n <= 0:
                    break
                mine = max(0, min(n, len(ref) - a))  # what ref has of it
                if not ref.startswith(buf[:mine], a) or not is_zero(buf[mine:n]):
                    return False
                a += n
            pos = b
        return size >= len(ref) or is_zero(refv[size:])


class SparseRef:
    """An expected contents file as its data extents (its holes read zeros):
    the per-sector judge costs a disk's data, not its size (194's disks are
    up to 256 MiB, a few MiB of them data)."""

    def __init__(self, path):
        self.extents = []  # (offset, bytes)
        self.size = 0
        if path is None:
            return
        with open(path, "rb", buffering=0) as f:
            self.size = os.fstat(f.fileno()).st_size
            for a, b in data_extents(f, self.size):
                while a < b:
                    chunk = os.pread(f.fileno(), b - a, a)
                    if not chunk:
                        break
                    self.extents.append((a, chunk))
                    a += len(chunk)

    def read(self, a, b):
        """Bytes [a, b) (a bytearray), zeros where the file has none."""
        out = bytearray(b - a)
        for off, data in self.extents:
            lo, hi = max(a, off), min(b, off + len(data))
            if lo < hi:
                out[lo - a:hi - a] = memoryview(data)[lo - off:hi - off]
        return out


def load_expected(paths, mode):
    """The contents --expect-raw names ('zero': all zeros), for
    check_expected: bytes for mode 'one-of', SparseRefs for 'per-sector'."""
    if mode == "one-of":
        return [open(p, "rb").read() if p != "zero" else None for p in paths]
    return [SparseRef(p if p != "zero" else None) for p in paths]


_SPANS = [None, None]  # per-sector's spans of one explore's refs: (refs, spans)


def ref_spans(refs):
    """[(a, b, [each ref's bytes a..b])]: the sector-aligned ranges where
    some ref has data, merged (also across gaps under 1 MiB: a few large
    spans cost less Python than many small ones); everywhere else every
    ref reads zeros.  Worked out once an explore."""
    if _SPANS[0] is not refs:
        ranges = sorted((off // SECTOR * SECTOR, -(-(off + len(d)) // SECTOR) * SECTOR)
                        for r in refs for off, d in r.extents)
        merged = []
        for a, b in ranges:
            if merged and a <= merged[-1][1] + MIB:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        _SPANS[:] = [refs, [(a, b, [r.read(a, b) for r in refs]) for a, b in merged]]
    return _SPANS[1]


def outside(a, b, spans):
    """The parts of [a, b) no span covers."""
    out = []
    for sa, sb, _refs in spans:
        if sb <= a:
            continue
        if sa >= b:
            break
        if sa > a:
            out.append((a, sa))
        a = max(a, sb)
    if a < b:
        out.append((a, b))
    return out


def check_expected(raw_path, expect, mode):
    """The disk reads one of the expected raw images (mode 'one-of'), or each
    sector reads the same sector of one of them ('per-sector'); 'zero' in the
    list stands for all zeros; shorter images count as zero-padded.  The
    disk may be huge and sparse: only its data extents are read, and with
    'per-sector' only the refs' data extents (load_expected)."""
    if mode == "one-of":
        refs = [e if e is not None else b"" for e in expect]
        if any(file_equals(raw_path, r) for r in refs):
            return []
        return ["the disk matches none of the expected contents"]
    limit = max(r.size for r in expect)
    spans = ref_spans(expect)
    bad = []
    size = os.path.getsize(raw_path)
    with open(raw_path, "rb", buffering=0) as f:
        fd = f.fileno()
        # where every ref reads zeros, so must the disk (holes do)
        for a, b in data_extents(f, size):
            for lo, hi in outside(a, b, spans):
                while lo < hi:
                    chunk = os.pread(fd, min(hi - lo, MIB), lo)
                    if not chunk:
                        break
                    if not is_zero(chunk):
                        at = lo + len(chunk) - len(bytes(chunk).lstrip(b"\0"))
                        if at >= limit:
                            return bad + ["data past the end of every expected contents "
                                          "at %d" % at]
                        bad.append("sector %d reads none of the allowed contents (all "
                                   "read zeros there)" % (at // SECTOR))
                        if len(bad) >= 5:
                            return bad
                        break
                    lo += len(chunk)
        step = 128 * SECTOR
        for a, b, padded in spans:
            # into one reused buffer (fresh memory costs page faults)
            head = memoryview(buffer(b - a))
            n = os.preadv(fd, [head], a)
            head[n:] = bytes(b - a - n)  # (a shorter disk reads zeros)
            for pos in range(0, b - a, step):
                if any(r.startswith(head[pos:pos + step], pos) for r in padded):
                    continue  # all of it reads one of them
                for s in range(pos, min(b - a, pos + step), SECTOR):
                    if not any(r.startswith(head[s:s + SECTOR], s) for r in padded):
                        bad.append("sector %d reads none of the allowed contents" %
                                   ((a + s) // SECTOR))
                        if len(bad) >= 5:
                            return bad
    return bad


_REFS = {}  # path -> contents of the reference files (cleared by each explore)
_SNAPS = {}  # (image, snapshot name) -> whether it exists (cleared for each state)



def forget_refs():
    """Forget the reference files read (a new explore)."""
    _REFS.clear()


def forget_snapshots():
    """Forget which snapshots exist (a new state)."""
    _SNAPS.clear()


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

