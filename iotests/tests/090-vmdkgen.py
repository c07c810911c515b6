#!/usr/bin/env python3
"""Hand-built VMDK images, written from the format's description (VMware's
"Virtual Disk Format 5.0", libyal's libvmdk notes), for what qemu-img cannot
make: VMware's streamOptimized layout (grain, table and footer markers,
the grain directory at the end), vmfsSparse (COWD) and seSparse extents,
delta disks, descriptors with several extents, and malformed images.

Usage: 090-vmdkgen.py KIND OUT [ARGS...]; prints nothing, writes OUT (and
the files a descriptor names next to it) and OUT.raw, the bytes the disk
must read as (the model), for the readable kinds.

Kinds:
  sparse OUT SIZE_MB              monolithicSparse, GD/GT preallocated
  stream OUT SIZE_MB              VMware streamOptimized (markers, footer)
  stream-nomarker OUT SIZE_MB     compressed grains without markers
  stream-shuffle OUT SIZE_MB      stream, the grains in random file order,
                                  some stored (records over a grain)
  cowd OUT SIZE_MB                a vmfsSparse descriptor + COWD extent
  sesparse OUT SIZE_MB            a seSparse descriptor + extent
  multi OUT                       monolithicFlat with flat+flat extents
  chain OUT                       three delta disks OUT-base, OUT-mid, OUT
  bad OUT CLASS                   a malformed image (see BAD below)
  bad-each DIR CLASS...           DIR/CLASS/CLASS.vmdk for each CLASS (as bad)
  many KIND OUT SIZE_MB...        several readable ones in one start, each
                                  as "KIND OUT SIZE_MB" makes it
"""
import os
import random
import struct
import sys
import zlib

SECTOR = 512


def desc(create_type, extents, cid=0x12345678, parent_cid=0xFFFFFFFF, parent=None):
    lines = ["# Disk DescriptorFile", "version=1", "CID=%08x" % cid,
             "parentCID=%08x" % parent_cid, 'createType="%s"' % create_type]
    if parent:
        lines.append('parentFileNameHint="%s"' % parent)
    lines += ["", "# Extent description"] + extents
    lines += ["", "# The Disk Data Base", "#DDB", "",
              'ddb.virtualHWVersion = "4"', 'ddb.adapterType = "ide"']
    return ("\n".join(lines) + "\n").encode()


def pattern(rng, n):
    """Data that compresses a little (half random, half repeated)."""
    half = rng.randbytes(n // 2)
    return half + bytes([half[0]]) * (n - len(half))


def layout(size, grain, rng, density=0.3, zero_runs=False):
    """{grain index: bytes or None (a zeroed grain)} for a disk of size."""
    grains = {}
    n = size // grain
    for g in range(n):
        r = rng.random()
        if r < density:
            grains[g] = pattern(rng, grain)
        elif zero_runs and r < density + 0.1:
            grains[g] = None
    # the last grain and a run across a grain table boundary
    grains[n - 1] = pattern(rng, grain)
    return grains


def model(size, grain, grains, base=None):
    """The disk's bytes as (size, {offset: bytes}), zeros elsewhere (over
    base, such a model): written sparse by write_model.  (A bytes of the
    whole disk cost ~0.5 s of page faults and writes an image here.)"""
    out = dict(base[1]) if base is not None else {}
    for g, data in grains.items():
        out[g * grain] = data if data is not None else bytes(grain)
    return size, out


def write_model(path, raw):
    """Write raw (bytes, or model's (size, {offset: bytes})) to path, the
    zeros of a model as holes (they read the same)."""
    with open(path, "wb") as f:
        if isinstance(raw, bytes):
            f.write(raw)
            return
        size, parts = raw
        f.truncate(size)
        for off, data in sorted(parts.items()):
            if data.count(0) != len(data):
                os.pwrite(f.fileno(), data, off)


def vmdk4_header(capacity, grain_sectors, desc_off, desc_size, gtes, rgd_off, gd_off,
                 grain_off, flags, version=1, compress=0):
    h = bytearray(SECTOR)
    h[0:4] = b"KDMV"
    struct.pack_into("<IIQQQQIQQQ", h, 4, version, flags, capacity, grain_sectors,
                     desc_off, desc_size, gtes, rgd_off, gd_off, grain_off)
    h[72] = 0
    h[73:77] = b"\n \r\n"
    struct.pack_into("<H", h, 77, compress)
    return bytes(h)


def write_sparse(path, size, grains, grain=65536, gtes=512, descriptor=None,
                 zero_grain=False, version=1, flags_extra=0):
    """A hosted sparse extent as QEMU and VMware lay it out: header,
    descriptor (20 sectors), redundant GD + GTs, GD + GTs, grains."""
    gs = grain // SECTOR
    capacity = size // SECTOR
    ngt = -(-capacity // (gtes * gs))
    gd_sectors = -(-ngt * 4 // SECTOR)
    gt_sectors = gtes * 4 // SECTOR
    rgd = 21
    gd = rgd + gd_sectors + ngt * gt_sectors
    overhead = gd + gd_sectors + ngt * gt_sectors
    overhead = -(-overhead // gs) * gs
    flags = 3 | (4 if zero_grain else 0) | flags_extra
    img = bytearray(overhead * SECTOR)
    img[0:SECTOR] = vmdk4_header(capacity, gs, 1 if descriptor else 0,
                                 20 if descriptor else 0, gtes, rgd, gd, overhead,
                                 flags, version)
    if descriptor:
        img[SECTOR:SECTOR + len(descriptor)] = descriptor
    tables = {}
    next_sector = overhead
    data = bytearray()
    for g in sorted(grains):
        if grains[g] is None:
            tables[g] = 1
            continue
        tables[g] = next_sector
        data += grains[g]
        next_sector += gs
    for base in (rgd, gd):
        for t in range(ngt):
            struct.pack_into("<I", img, base * SECTOR + 4 * t,
                             base + gd_sectors + t * gt_sectors)
            for i in range(gtes):
                g = t * gtes + i
                if g in tables:
                    struct.pack_into("<I", img,
                                     (base + gd_sectors + t * gt_sectors) * SECTOR + 4 * i,
                                     tables[g])
    with open(path, "wb") as f:
        f.write(img + data)


def marker(val, mtype):
    m = bytearray(SECTOR)
    struct.pack_into("<QII", m, 0, val, 0, mtype)
    return bytes(m)


def write_stream(path, size, grains, grain=65536, markers=True, shuffle=None):
    """VMware's streamOptimized: header with GD_AT_END, descriptor, grains
    with markers (each padded to a sector), per-table GT markers and
    tables, the GD marker and GD, footer marker, footer, end of stream.
    shuffle (a random.Random): the grains in random file order, each
    deflated at level 0, 1 or 9 (level 0: a record longer than a grain)."""
    gs = grain // SECTOR
    gtes = 512
    capacity = size // SECTOR
    ngt = -(-capacity // (gtes * gs))
    flags = 1 | (1 << 16) | ((1 << 17) if markers else 0)  # VMware: no RGD
    d = desc("streamOptimized", ['RW %d SPARSE "%s"' % (capacity, os.path.basename(path))])
    body = bytearray()
    body += vmdk4_header(capacity, gs, 1, 20, gtes, 0, 0xFFFFFFFFFFFFFFFF, 128, flags, 3, 1)
    body += d + bytes(20 * SECTOR - len(d))
    body += bytes(128 * SECTOR - len(body))
    gtv = [0] * (ngt * gtes)
    order = sorted(grains)
    if shuffle:
        shuffle.shuffle(order)
    for g in order:
        data = grains[g]
        if data is None:
            continue
        c = zlib.compress(data, shuffle.choice((0, 1, 9)) if shuffle else -1)
        gtv[g] = len(body) // SECTOR
        if markers:
            rec = struct.pack("<QI", g * gs, len(c)) + c
        else:
            rec = c
        body += rec + bytes(-len(rec) % SECTOR)
    gdv = []
    for t in range(ngt):
        entries = gtv[t * gtes:(t + 1) * gtes]
        if not any(entries):
            gdv.append(0)
            continue
        if markers:
            body += marker(gtes * 4 // SECTOR, 1)
        gdv.append(len(body) // SECTOR)
        body += struct.pack("<%dI" % gtes, *entries)
    gd_bytes = struct.pack("<%dI" % ngt, *gdv)
    gd_bytes += bytes(-len(gd_bytes) % SECTOR)
    if markers:
        body += marker(len(gd_bytes) // SECTOR, 2)
    gd_sector = len(body) // SECTOR
    body += gd_bytes
    body += marker(1, 3)
    body += vmdk4_header(capacity, gs, 1, 20, gtes, 0, gd_sector, 128, flags, 3, 1)
    body += marker(0, 0)
    with open(path, "wb") as f:
        f.write(body)


def write_cowd(path, size, grains, grain=4096):
    """A VMDK3 (COWD) sparse extent: header, GD, GTs of 4096 entries."""
    gs = grain // SECTOR
    capacity = size // SECTOR
    gtes = 4096
    ngt = -(-capacity // (gtes * gs))
    gd_off = 4
    gt_off = gd_off + -(-ngt * 4 // SECTOR)
    data_off = gt_off + ngt * gtes * 4 // SECTOR
    h = bytearray(SECTOR * gd_off)
    h[0:4] = b"COWD"
    struct.pack_into("<IIIIII", h, 4, 1, 3, capacity, gs, gd_off, ngt)
    img = bytearray(h) + bytearray((data_off - gd_off) * SECTOR)
    nxt = data_off
    data = bytearray()
    for t in range(ngt):
        struct.pack_into("<I", img, gd_off * SECTOR + 4 * t, gt_off + t * gtes * 4 // SECTOR)
    for g in sorted(grains):
        t, i = divmod(g, gtes)
        struct.pack_into("<I", img, (gt_off + t * gtes * 4 // SECTOR) * SECTOR + 4 * i, nxt)
        data += grains[g]
        nxt += gs
    with open(path, "wb") as f:
        f.write(img + data)


def write_sesparse(path, size, grains, zeroed=()):
    """An ESXi seSparse extent: const header, volatile header, GD of 64-bit
    entries 0x10000000_<table index>, tables of 4096 typed entries, grains
    of 4 KiB (entry 0x3 | offset split as QEMU decodes it)."""
    grain = 4096
    gs = 8
    capacity = size // SECTOR
    gtes = 4096
    ngt = -(-capacity // (gtes * gs))
    vol_off = 1
    gd_off = 2
    gd_sectors = -(-ngt * 8 // SECTOR)
    gt_off = gd_off + gd_sectors
    grains_off = gt_off + ngt * 64
    const = bytearray(SECTOR)
    struct.pack_into("<QQQQQQ", const, 0, 0xCAFEBABE, 0x0000000200000001, capacity, 8, 64, 0)
    struct.pack_into("<QQ", const, 80, vol_off, 1)
    struct.pack_into("<QQQQ", const, 128, gd_off, gd_sectors, gt_off, ngt * 64)
    struct.pack_into("<QQ", const, 192, grains_off, 0)
    vol = bytearray(SECTOR)
    struct.pack_into("<Q", vol, 0, 0xCAFECAFE)
    img = bytearray(grains_off * SECTOR)
    img[0:SECTOR] = const
    img[SECTOR:2 * SECTOR] = vol
    used = set(g // gtes for g in grains) | set(g // gtes for g in zeroed)
    for t in used:
        struct.pack_into("<Q", img, gd_off * SECTOR + 8 * t, 0x1000000000000000 | t)
    data = bytearray()
    for n, g in enumerate(sorted(grains)):
        t, i = divmod(g, gtes)
        e = 0x3000000000000000 | ((n & 0xFFF) << 48) | (n >> 12)
        struct.pack_into("<Q", img, (gt_off + t * 64) * SECTOR + 8 * i, e)
        data += grains[g]
    for g in zeroed:
        t, i = divmod(g, gtes)
        struct.pack_into("<Q", img, (gt_off + t * 64) * SECTOR + 8 * i, 0x2000000000000000)
    with open(path, "wb") as f:
        f.write(img + data)


BAD = {
    # class: (what to build, how to break it)
    "gtes": "num_gtes_per_gt 1024 (> 512)",
    "granularity": "granularity 0x400000 sectors (> 1 GiB)",
    "granularity0": "granularity 0",
    "version": "version 4",
    "gd-beyond": "grain directory past the end of the file",
    "gd-huge": "capacity needing more than 32M grain directory entries",
    "capacity": "capacity of 2^62 sectors",
    "truncated": "grain offset past the end of the file",
    "footer": "GD_AT_END with a broken footer",
    "marker-size": "a grain marker claiming 1 MiB of compressed data",
    "bad-deflate": "a grain marker followed by garbage",
    "gte-eof": "a grain table entry pointing past the end of the file",
    "gte-huge": "a grain table entry 0xffffffff",
    "no-cid": "a descriptor without CID",
    "create-type": "a descriptor with createType \"weird\"",
    "extent-line": "a FLAT extent line without offset",
    "extent-missing": "a twoGbMaxExtentSparse whose second extent is missing",
    "extent-abs": "an extent naming /etc/passwd",
    "extent-dotdot": "an extent naming ../outside.vmdk",
    "extent-dev": "an extent naming /dev/zero",
    "extent-json": "an extent naming json:{}",
    "parent-long": "a parentFileNameHint without closing quote",
    "sesparse-magic": "a seSparse const header with a bad magic",
    "sesparse-dirty": "a seSparse volatile header asking for journal replay",
    "sesparse-gd": "a seSparse GD entry 0x2000000000000000",
    "cowd-gd": "a COWD header with a grain directory past the end",
    "desc-nul": "a descriptor of 1 MiB of spaces",
}


def build_bad(out, cls, rng):
    d = os.path.dirname(out) or "."
    base = os.path.basename(out)
    grains = {0: pattern(rng, 65536), 3: pattern(rng, 65536)}
    if cls in ("gtes", "granularity", "granularity0", "version", "gd-beyond", "gd-huge",
               "capacity", "truncated", "gte-eof", "gte-huge"):
        dd = desc("monolithicSparse", ['RW 8192 SPARSE "%s"' % base])
        write_sparse(out, 4 << 20, grains, descriptor=dd)
        with open(out, "r+b") as f:
            h = bytearray(f.read(SECTOR))
            gd = struct.unpack_from("<Q", h, 56)[0]
            if cls == "gtes":
                struct.pack_into("<I", h, 44, 1024)
            elif cls == "granularity":
                struct.pack_into("<Q", h, 20, 0x400000)
                struct.pack_into("<I", h, 44, 1)
            elif cls == "granularity0":
                struct.pack_into("<Q", h, 20, 0)
            elif cls == "version":
                struct.pack_into("<I", h, 4, 4)
            elif cls == "gd-beyond":
                struct.pack_into("<Q", h, 56, 1 << 30)
                struct.pack_into("<I", h, 8, 1)  # no redundant GD
            elif cls == "gd-huge":
                struct.pack_into("<Q", h, 12, 1 << 50)
            elif cls == "capacity":
                struct.pack_into("<Q", h, 12, 1 << 62)
                struct.pack_into("<Q", h, 20, 0x200000)
            elif cls == "truncated":
                struct.pack_into("<Q", h, 64, 1 << 40)
            elif cls in ("gte-eof", "gte-huge"):
                f.seek(gd * SECTOR)
                gt = struct.unpack("<I", f.read(4))[0]
                f.seek(gt * SECTOR + 4)
                f.write(struct.pack("<I", 0x100000 if cls == "gte-eof" else 0xFFFFFFFF))
            f.seek(0)
            f.write(h)
        return
    if cls in ("footer", "marker-size", "bad-deflate"):
        write_stream(out, 4 << 20, grains)
        size = os.path.getsize(out)
        with open(out, "r+b") as f:
            if cls == "footer":
                f.seek(size - 2 * SECTOR)
                f.write(b"XXXX")
            else:
                f.seek(128 * SECTOR + 8)
                if cls == "marker-size":
                    f.write(struct.pack("<I", 1 << 20))
                else:
                    f.write(struct.pack("<I", 100) + b"garbage!" * 12)
        return
    if cls == "no-cid":
        dd = desc("monolithicFlat", ['RW 2048 FLAT "%s-flat.vmdk" 0' % base])
        dd = dd.replace(b"CID=12345678\n", b"")
        dd = dd.replace(b"parentCID", b"parentXID")
    elif cls == "create-type":
        dd = desc("weird", ['RW 2048 FLAT "%s-flat.vmdk" 0' % base])
    elif cls == "extent-line":
        dd = desc("monolithicFlat", ['RW 2048 FLAT "%s-flat.vmdk"' % base])
    elif cls == "extent-missing":
        write_sparse(os.path.join(d, base + "-s001.vmdk"), 1 << 20, {0: pattern(rng, 65536)})
        dd = desc("twoGbMaxExtentSparse", ['RW 2048 SPARSE "%s-s001.vmdk"' % base,
                                            'RW 2048 SPARSE "%s-s002.vmdk"' % base])
    elif cls == "extent-abs":
        dd = desc("monolithicFlat", ['RW 2048 FLAT "/etc/passwd" 0'])
    elif cls == "extent-dotdot":
        dd = desc("monolithicFlat", ['RW 2048 FLAT "../outside.vmdk" 0'])
    elif cls == "extent-dev":
        dd = desc("monolithicFlat", ['RW 2048 FLAT "/dev/zero" 0'])
    elif cls == "extent-json":
        dd = desc("monolithicFlat", ['RW 2048 FLAT "json:{}" 0'])
    elif cls == "parent-long":
        dd = desc("monolithicFlat", ['RW 2048 FLAT "%s-flat.vmdk" 0' % base])
        dd = dd.replace(b'createType', b'parentFileNameHint="no-end\ncreateType')
    elif cls in ("sesparse-magic", "sesparse-dirty", "sesparse-gd"):
        ext = base + "-sesparse.vmdk"
        write_sesparse(os.path.join(d, ext), 4 << 20, {0: pattern(rng, 4096)})
        with open(os.path.join(d, ext), "r+b") as f:
            if cls == "sesparse-magic":
                f.write(struct.pack("<Q", 0xBADBAD))
            elif cls == "sesparse-dirty":
                f.seek(SECTOR + 24)
                f.write(struct.pack("<Q", 1))
            else:
                f.seek(2 * SECTOR)
                f.write(struct.pack("<Q", 0x2000000000000000))
        dd = desc("seSparse", ['RW 8192 SESPARSE "%s"' % ext])
    elif cls == "cowd-gd":
        ext = base + "-cowd.vmdk"
        write_cowd(os.path.join(d, ext), 4 << 20, {0: pattern(rng, 4096)})
        with open(os.path.join(d, ext), "r+b") as f:
            f.seek(20)
            f.write(struct.pack("<I", 1 << 24))
        dd = desc("vmfsSparse", ['RW 8192 VMFSSPARSE "%s"' % ext])
    elif cls == "desc-nul":
        dd = b"# Disk DescriptorFile\nversion=1\n" + b" " * ((1 << 20) - 40)
    else:
        raise SystemExit("unknown class " + cls)
    with open(out, "wb") as f:
        f.write(dd)
    with open(os.path.join(d, base + "-flat.vmdk"), "wb") as f:
        f.write(bytes(2048 * SECTOR))


def main():
    kind, out = sys.argv[1], sys.argv[2]
    if kind == "many":  # KIND OUT SIZE_MB triples, each as "KIND OUT SIZE_MB"
        args = sys.argv[2:]
        if len(args) % 3:
            raise SystemExit("many: KIND OUT SIZE_MB triples")
        for i in range(0, len(args), 3):
            build(args[i], args[i + 1], [args[i + 2]])
        return
    build(kind, out, sys.argv[3:])


def build(kind, out, argv):
    rng = random.Random(kind + os.path.basename(out))
    d = os.path.dirname(out) or "."
    base = os.path.basename(out)
    if kind == "bad":
        build_bad(out, argv[0], rng)
        return
    if kind == "bad-each":  # OUT is a folder: OUT/CLASS/CLASS.vmdk for each
        for cls in argv:
            name = cls + ".vmdk"  # (the seed "bad" would make for it)
            os.makedirs(os.path.join(out, cls))
            build_bad(os.path.join(out, cls, name), cls, random.Random("bad" + name))
        return
    if kind == "list-bad":
        print(" ".join(BAD))
        return
    size = int(argv[0]) << 20 if argv else 0
    if kind == "sparse":
        grains = layout(size, 65536, rng, zero_runs=True)
        dd = desc("monolithicSparse", ['RW %d SPARSE "%s"' % (size // SECTOR, base)])
        write_sparse(out, size, grains, descriptor=dd, zero_grain=True)
        raw = model(size, 65536, grains)
    elif kind in ("stream", "stream-nomarker", "stream-shuffle"):
        grains = layout(size, 65536, rng)
        write_stream(out, size, grains, markers=kind != "stream-nomarker",
                     shuffle=rng if kind == "stream-shuffle" else None)
        raw = model(size, 65536, grains)
    elif kind == "cowd":
        grains = layout(size, 4096, rng)
        ext = base + "-cowd.vmdk"
        write_cowd(os.path.join(d, ext), size, grains)
        with open(out, "wb") as f:
            f.write(desc("vmfsSparse", ['RW %d VMFSSPARSE "%s"' % (size // SECTOR, ext)]))
        raw = model(size, 4096, grains)
    elif kind == "sesparse":
        grains = layout(size, 4096, rng)
        zeroed = [g for g in range(size // 4096) if g not in grains and g % 7 == 3]
        ext = base + "-sesparse.vmdk"
        write_sesparse(os.path.join(d, ext), size, grains, zeroed)
        with open(out, "wb") as f:
            f.write(desc("seSparse", ['RW %d SESPARSE "%s"' % (size // SECTOR, ext)]))
        raw = model(size, 4096, grains)
    elif kind == "multi":
        a = rng.randbytes(1 << 20)
        b = rng.randbytes(3 << 20)
        with open(os.path.join(d, base + "-a.bin"), "wb") as f:
            f.write(a)
        with open(os.path.join(d, base + "-b.bin"), "wb") as f:
            f.write(bytes(4096) + b)
        with open(out, "wb") as f:
            f.write(desc("monolithicFlat", ['RW 2048 FLAT "%s-a.bin" 0' % base,
                                            'RDONLY 2048 FLAT "%s-a.bin" 0' % base,
                                            'RW 6144 VMFS "%s-b.bin"' % base,
                                            'RW 4096 FLAT "%s-b.bin" 8' % base]))
        raw = a + bytes(4096) + b[:(3 << 20) - 4096] + b[:2 << 20]
    elif kind == "chain":
        size = 8 << 20
        prev, model_bytes, prev_cid = None, None, None
        for n, name in enumerate((base + "-base.vmdk", base + "-mid.vmdk", base)):
            grains = {g: pattern(rng, 65536) for g in range(size // 65536)
                      if rng.random() < 0.4}
            cid = 0x1000 + n
            dd = desc("monolithicSparse", ['RW %d SPARSE "%s"' % (size // SECTOR, name)],
                      cid=cid, parent_cid=prev_cid if prev else 0xFFFFFFFF, parent=prev)
            write_sparse(os.path.join(d, name), size, grains, descriptor=dd)
            model_bytes = model(size, 65536, grains, model_bytes)
            prev, prev_cid = name, cid
        raw = model_bytes
    else:
        raise SystemExit("unknown kind " + kind)
    write_model(out + ".raw", raw)


if __name__ == "__main__":
    main()
