"""The crash-state explorer's judges for the formats other than qcow2
(imported by crash.py; --format).

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
        ('log-replayed').
check_inside_file is DESIGN rule 1 for them: every block the BAT or block
map references ends inside the file, as `qemu-img map` reports the blocks
(VHDX, which qemu-img maps without offsets: from its BAT)
(vpc.c invariant 4, vdi.c invariant 3, vhdx.c invariant 5: the file is
extended over a block before a table entry points at it).
"""
import json
import os
import re
import shutil
import subprocess

QEMU_IMG = os.environ.get("QEMU_IMG", "qemu-img")
MAGIC = {"vpc": (0, b"conectix"), "vdi": (64, b"\x7f\x10\xda\xbe"), "vhdx": (0, b"vhdxfile")}


def run(cmd, **kw):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)
    return p.returncode, p.stdout.decode(errors="replace")


def looks_like(path, fmt):
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


def check_inside_file(img, fmt):
    """The problems (a list of strings) of guest data the format's tables
    place past the end of the file, by QEMU's own reading of them (VHDX:
    vhdx_inside)."""
    size = os.path.getsize(img)
    if fmt == "vhdx":
        return vhdx_inside(img, size)
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
