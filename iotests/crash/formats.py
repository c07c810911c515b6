"""The crash-state explorer's judges for the formats other than qcow2
(imported by judges.py; crash.py explore --format).

Each judge returns (verdict, detail, image to read the contents from):
  vpc   qemu-img has no check for VHD: the state must open (qemu-img info
        refuses a BAT that points past the end of the file) -- 'clean';
  vdi   qemu-img check; its one finding that a power loss may leave is the
        header counting blocks the block map does not reference yet
        ("allocated blocks mismatch, is X, should be Y" with X < Y: leaked
        blocks, vdi/vdi.c invariant 3) -- 'leaks'; anything else is
        'corrupt';
  vhdx  qemu-img check; a state whose log needs replaying (QEMU refuses to
        open it read-only) is replayed by `qemu-img check -r all` on a copy
        -- QEMU's own replay -- and judged, and read, as that copy
        ('log-replayed');
  vmdk  qemu-img check (QEMU's finds grains that start past the end of
        their extent file; it has no leak check: grains a power loss left
        unreferenced at the end of an extent are invisible) -- 'clean',
        or 'corrupt'.
check_inside_file is DESIGN rule 1 for them: every block the BAT or block
map references ends inside the file, as `qemu-img map` reports the blocks
(VHDX, which qemu-img maps without offsets: from its BAT; VMDK, whose
extents qemu-img's JSON map does not name: from the grain directories and
tables of every sparse extent, vmdk_inside)
(vpc.c invariant 4, vdi.c invariant 3, vhdx.c invariant 5, vmdk/write.c
invariant 1: the file is extended over a block before a table entry points
at it).
"""
import json
import os
import re
import shutil
import subprocess

QEMU_IMG = os.environ.get("QEMU_IMG", "qemu-img")
# common.sh makes QEMU_IMG iotests/qemu-img-pbkdf-retry, a bash script that
# execs QEMU_IMG_REAL for any command naming neither luks nor encrypt: run
# forks that qemu-img itself, without a bash start (~6 ms of CPU) for each
# of the hundreds of judges a test runs.
_QEMU_IMG_REAL = os.environ.get("QEMU_IMG_REAL")
if os.path.basename(QEMU_IMG) != "qemu-img-pbkdf-retry":
    _QEMU_IMG_REAL = None
MAGIC = {"vpc": (0, b"conectix"), "vdi": (64, b"\x7f\x10\xda\xbe"), "vhdx": (0, b"vhdxfile")}
VMDK_DESC = b"# Disk DescriptorFile"


def run(cmd, **kw):
    """Run cmd, its stdout and stderr together: (exit code, text)."""
    if (_QEMU_IMG_REAL and cmd and cmd[0] == QEMU_IMG and
            not any("luks" in str(a) or "encrypt" in str(a) for a in cmd[1:])):
        cmd = [_QEMU_IMG_REAL] + list(cmd[1:])
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)
    return p.returncode, p.stdout.decode(errors="replace")


def looks_like(path, fmt):
    if fmt == "vmdk":  # a sparse extent, or a descriptor file (twoGb*)
        with open(path, "rb") as f:
            head = f.read(len(VMDK_DESC))
        return head[:4] == b"KDMV" or head == VMDK_DESC
    off, magic = MAGIC[fmt]
    with open(path, "rb") as f:
        f.seek(off)
        return f.read(len(magic)) == magic


def judge(img, fmt):
    if not looks_like(img, fmt):
        return "no-image", "", img
    cwd = os.path.dirname(img)
    if fmt == "vpc":
        rc, out = run([QEMU_IMG, "info", "-f", "vpc", img], cwd=cwd)
        return ("clean" if rc == 0 else "corrupt"), out, img
    if fmt == "vdi":
        rc, out = run([QEMU_IMG, "check", "-f", "vdi", img], cwd=cwd)
        if rc == 0:
            return "clean", out, img
        errs = [l for l in out.splitlines() if l.startswith("ERROR")]
        m = [re.match(r"ERROR: allocated blocks mismatch, is (\d+), should be (\d+)$", l)
             for l in errs]
        if errs and all(x and int(x.group(1)) < int(x.group(2)) for x in m):
            return "leaks", out, img
        return "corrupt", out, img
    if fmt == "vmdk":
        rc, out = run([QEMU_IMG, "check", "-f", "vmdk", img], cwd=cwd)
        return ("clean" if rc == 0 else "corrupt"), out, img
    rc, out = run([QEMU_IMG, "check", "-f", "vhdx", img], cwd=cwd)
    if rc == 0:
        return "clean", out, img
    if "needs to be replayed" not in out:
        return "corrupt", out, img
    copy = img + ".replayed"
    shutil.copyfile(img, copy)
    rc, out2 = run([QEMU_IMG, "check", "-r", "all", "-f", "vhdx", copy], cwd=cwd)
    if rc != 0:
        return "corrupt", "the log did not replay:\n" + out2, img
    rc, out3 = run([QEMU_IMG, "check", "-f", "vhdx", copy], cwd=cwd)
    return ("log-replayed" if rc == 0 else "corrupt"), out2 + out3, copy


def vhdx_inside(img, size):
    """VHDX: every present payload block and sector bitmap block the BAT
    references (region table 1, metadata's block and logical sector
    sizes) ends inside the file.  qemu-img map shows no offsets for VHDX."""
    import struct
    import sys
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import hvimg as h
    with open(img, "rb") as f:
        f.seek(192 * 1024)
        t = f.read(65536)
        regions = {}
        for i in range(min(struct.unpack_from("<I", t, 8)[0], 2047)):
            guid = t[16 + 32 * i:32 + 32 * i]
            regions[guid] = struct.unpack_from("<QI", t, 32 + 32 * i)
        bat_off, bat_len = regions[h.G_BAT]
        meta_off, _ = regions[h.G_META]
        f.seek(meta_off)
        m = f.read(65536)
        items = {}
        for i in range(min(struct.unpack_from("<H", m, 10)[0], 2047)):
            e = 32 + 32 * i
            items[m[e:e + 16]] = struct.unpack_from("<I", m, e + 16)[0]
        f.seek(meta_off + items[h.G_PARAMS])
        block_size = struct.unpack("<I", f.read(4))[0]
        f.seek(meta_off + items[h.G_LSS])
        lss = struct.unpack("<I", f.read(4))[0]
        f.seek(bat_off)
        bat = f.read(bat_len)
    chunk = (1 << 23) * lss // block_size  # payload entries per bitmap entry
    problems = []
    for i in range(len(bat) // 8):
        e = struct.unpack_from("<Q", bat, 8 * i)[0]
        state, off = e & 7, (e >> 20) << 20
        bitmap = i % (chunk + 1) == chunk
        if (state == 6 or (state == 7 and not bitmap)) and \
                off + (h.MIB if bitmap else block_size) > size:
            problems.append("vhdx %s block at %d (BAT entry %d) ends past the end of the "
                            "file (%d bytes)" % ("bitmap" if bitmap else "payload", off, i,
                                                  size))
    return problems[:8]


def vmdk_extent_files(img):
    """The hosted sparse extent files of a VMDK: the image itself when it
    is one (monolithicSparse), else the SPARSE lines of its descriptor
    (names relative to the descriptor's folder)."""
    with open(img, "rb") as f:
        head = f.read(65536)
    if head[:4] == b"KDMV":
        return [img]
    out = []
    for line in head.split(b"\0")[0].decode(errors="replace").splitlines():
        m = re.match(r'\s*(RW|RDONLY|NOACCESS)\s+\d+\s+(\w+)\s+"([^"]*)"', line)
        if m and m.group(2) == "SPARSE":
            out.append(os.path.join(os.path.dirname(img), m.group(3)))
    return out


def vmdk_extent_inside(path):
    """One hosted sparse extent (VMDK4 header, little-endian): every grain
    table the grain directory or its redundant copy references, and every
    grain those tables reference, ends inside the extent file.  A zeroed
    grain (entry 1 with the zero-grain flag) has no bytes."""
    import struct
    size = os.path.getsize(path)
    name = os.path.basename(path)
    problems = []
    with open(path, "rb") as f:
        h = f.read(512)
        if len(h) < 79 or h[:4] != b"KDMV":
            return ["%s: not a hosted sparse extent" % name]
        flags, capacity, grain = struct.unpack_from("<IQQ", h, 8)
        gtes, rgd, gd = struct.unpack_from("<IQQ", h, 44)
        if grain == 0 or gtes == 0 or gtes > 512 or gd == (1 << 64) - 1:
            return ["%s: header not judged (grain %d, %d entries a table, GD at %d)"
                    % (name, grain, gtes, gd)]
        cover = gtes * grain
        gd_entries = (capacity + cover - 1) // cover
        zero_flag = bool(flags & 4)
        dirs = [("grain directory", gd)] + ([("redundant grain directory", rgd)]
                                           if flags & 2 and rgd else [])
        for what, sector in dirs:
            f.seek(sector * 512)
            d = f.read(4 * gd_entries)
            if len(d) < 4 * gd_entries:
                problems.append("%s: the %s ends past the end of the file" % (name, what))
                continue
            for i in range(gd_entries):
                gt = struct.unpack_from("<I", d, 4 * i)[0]
                if gt == 0:
                    continue
                if (gt + 1) * 512 > size or gt * 512 + 4 * gtes > size:
                    problems.append("%s: grain table %d of the %s (sector %d) ends past "
                                    "the end of the file (%d bytes)" % (name, i, what, gt, size))
                    continue
                f.seek(gt * 512)
                t = f.read(4 * gtes)
                for j in range(gtes):
                    e = struct.unpack_from("<I", t, 4 * j)[0]
                    if e == 0 or (e == 1 and zero_flag):
                        continue
                    if (e + grain) * 512 > size:
                        problems.append(
                            "%s: grain at %d (%s, table %d entry %d: guest offset %d of the "
                            "extent) ends past the end of the file (%d bytes)"
                            % (name, e * 512, what, i, j, (i * gtes + j) * grain * 512, size))
                if len(problems) > 8:
                    return problems
    return problems


def vmdk_inside(img):
    problems = []
    for path in vmdk_extent_files(img):
        if not os.path.exists(path):
            problems.append("extent %s is missing" % os.path.basename(path))
            continue
        problems += vmdk_extent_inside(path)
    return problems[:8]


def check_inside_file(img, fmt):
    """The problems (a list of strings) of guest data the format's tables
    place past the end of the file, by QEMU's own reading of them (VHDX:
    vhdx_inside)."""
    size = os.path.getsize(img)
    if fmt == "vhdx":
        return vhdx_inside(img, size)
    if fmt == "vmdk":
        return vmdk_inside(img)
    rc, out = run([QEMU_IMG, "map", "-f", fmt, "--output=json", img],
                  cwd=os.path.dirname(img))
    if rc != 0:
        return ["qemu-img map: " + out.strip()]
    problems = []
    for e in json.loads(out):
        if "offset" in e and e["offset"] + e["length"] > size:
            problems.append("%s data at %d (%d bytes, guest offset %d) ends past the end "
                            "of the file (%d bytes)"
                            % (fmt, e["offset"], e["length"], e["start"], size))
    return problems[:8]
