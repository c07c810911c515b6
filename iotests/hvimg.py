#!/usr/bin/env python3
"""Build VHD and VHDX images field by field from the specs, for the tests
that need what qemu-img cannot make (differencing disks, Virtual PC
geometry, VHDX logs to replay, torn and corrupt log entries) and for the
small fuzz seeds (fuzz/make-hyperv-seeds.sh).

Facts (Microsoft's "VHD Image Format Specification" and [MS-VHDX]):
  VHD: big-endian; 512-byte footer (checksum: one's complement of the byte
  sum), 1024-byte dynamic header, BAT of 32-bit sector numbers, each block
  a sector bitmap (bit 7 of byte 0 = sector 0) then data; parent locators
  W2ru/W2ku hold UTF-16LE paths, the parent name is UTF-16BE.
  VHDX: little-endian; CRC-32C checksums; BAT entries state | MiB << 20;
  a sector bitmap entry after every chunk-ratio payload entries; log
  entries of 4 KiB sectors (header + descriptors, then data sectors).

Usage as a command (the iotests):
  hvimg.py vhd-diff CHILD PARENT ...      see main() below
"""
import struct
import sys
import uuid

MIB = 1 << 20

# ---- CRC-32C ----

_CRC_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ (0x82F63B78 if _c & 1 else 0)
    _CRC_TABLE.append(_c)


def crc32c(data, crc=0):
    c = crc ^ 0xFFFFFFFF
    t = _CRC_TABLE
    for b in data:
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def msguid(s):
    """A GUID string as its on-disk bytes (data1-3 little-endian)."""
    return uuid.UUID(s).bytes_le


def guid_str(b):
    return "{%s}" % str(uuid.UUID(bytes_le=bytes(b))).upper()


class Sparse:
    """A file as {offset: bytes}; later writes win."""

    def __init__(self):
        self.parts = []

    def put(self, off, data):
        self.parts.append((off, bytes(data)))

    def end(self):
        return max((o + len(d) for o, d in self.parts), default=0)

    def write(self, path, size=None):
        with open(path, "wb") as f:
            f.truncate(size if size is not None else self.end())
            for off, data in self.parts:
                f.seek(off)
                f.write(data)

    def read(self, off, n):
        buf = bytearray(n)
        for o, d in self.parts:
            lo, hi = max(o, off), min(o + len(d), off + n)
            if lo < hi:
                buf[lo - off:hi - off] = d[lo - o:hi - o]
        return bytes(buf)


# ---- VHD ----

def vhd_chs(sectors):
    """The spec's CHS for a sector count (rounds down)."""
    sectors = min(sectors, 65535 * 16 * 255)
    if sectors >= 65535 * 16 * 63:
        s, h = 255, 16
        cth = sectors // s
    else:
        s = 17
        cth = sectors // s
        h = max(4, (cth + 1023) // 1024)
        if cth >= h * 1024 or h > 16:
            s, h = 31, 16
            cth = sectors // s
        if cth >= h * 1024:
            s, h = 63, 16
            cth = sectors // s
    return cth // h, h, s


def vhd_checksum(buf, skip):
    return ~sum(b for i, b in enumerate(buf) if not skip <= i < skip + 4) & 0xFFFFFFFF


def vhd_footer(size, disk_type, data_offset, uid, creator=b"vpc ", chs=None):
    cyls, heads, secs = chs if chs else vhd_chs(size // 512)
    f = bytearray(512)
    struct.pack_into(">8sIIQI4sHH4sQQHBBI", f, 0, b"conectix", 2, 0x10000, data_offset, 0,
                     creator, 5, 3, b"Wi2k", size, size, cyls, heads, secs, disk_type)
    f[68:84] = uid
    struct.pack_into(">I", f, 64, vhd_checksum(f, 64))
    return bytes(f)


def vhd_dynamic(path, size, block_size=2 * MIB, blocks=None, parent=None, uid=None,
                creator=b"vpc ", chs=None, data_fill=None):
    """A dynamic (or, with parent, differencing) VHD.

    blocks: {index: (data, bitmap)} -- data the block's bytes (short is
    padded with zeros), bitmap its sector bitmap bytes or None for all set.
    parent: {"uuid": bytes, "name": str, "w2ru": str, "w2ku": str} (any of
    the locators may be left out).
    """
    blocks = blocks or {}
    uid = uid or uuid.uuid4().bytes
    entries = -(-size // block_size)
    bat_off = 1536
    bat_bytes = -(-entries * 4 // 512) * 512
    img = Sparse()
    pos = bat_off + bat_bytes
    hdr = bytearray(1024)
    struct.pack_into(">8sQQIII", hdr, 0, b"cxsparse", 0xFFFFFFFFFFFFFFFF, bat_off, 0x10000,
                     entries, block_size)
    if parent:
        hdr[40:56] = parent["uuid"]
        name = parent.get("name", "").encode("utf-16-be")[:512]
        hdr[64:64 + len(name)] = name
        k = 0
        for code, key in ((b"W2ru", "w2ru"), (b"W2ku", "w2ku")):
            if key not in parent:
                continue
            text = parent[key].encode("utf-16-le")
            space = -(-len(text) // 512) * 512
            struct.pack_into(">4sIIIQ", hdr, 576 + 24 * k, code, space // 512, len(text), 0,
                             pos)
            img.put(pos, text)
            pos += space
            k += 1
    struct.pack_into(">I", hdr, 36, vhd_checksum(hdr, 36))
    bitmap_size = -(-(block_size // 4096) // 512) * 512 if block_size >= 4096 else 0
    bat = bytearray(b"\xff" * bat_bytes)
    for idx in sorted(blocks):
        data, bitmap = blocks[idx]
        struct.pack_into(">I", bat, 4 * idx, pos // 512)
        bm = bitmap if bitmap is not None else b"\xff" * bitmap_size
        img.put(pos, bytes(bm).ljust(bitmap_size, b"\0"))
        img.put(pos + bitmap_size, bytes(data).ljust(block_size, b"\0"))
        pos += bitmap_size + block_size
    footer = vhd_footer(size, 4 if parent else 3, 512, uid, creator, chs)
    img.put(0, footer)
    img.put(512, hdr)
    img.put(bat_off, bat)
    img.put(pos, footer)
    img.write(path)
    return uid


def vhd_fixed(path, data, size=None, creator=b"vpc ", chs=None):
    size = size if size is not None else len(data)
    img = Sparse()
    img.put(0, data)
    img.put(size, vhd_footer(size, 2, 0xFFFFFFFFFFFFFFFF, uuid.uuid4().bytes, creator, chs))
    img.write(path)


# ---- VHDX ----

G_BAT = msguid("2DC27766-F623-4200-9D64-115E9BFD4A08")
G_META = msguid("8B7CA206-4790-4B9A-B8FE-575F050F886E")
G_PARAMS = msguid("CAA16737-FA36-4D43-B3B6-33F0AA44E76B")
G_SIZE = msguid("2FA54224-CD1B-4876-B211-5DBED83BF4B8")
G_PAGE83 = msguid("BECA12AB-B2E6-4523-93EF-C309E000C746")
G_LSS = msguid("8141BF1D-A96F-4709-BA47-F233A8FAAB5F")
G_PSS = msguid("CDA348C7-445D-4471-9CC9-E9885251C556")
G_LOCATOR = msguid("A8D35F2D-B30B-454D-ABF7-D3D84834AB0C")
G_PARENT_TYPE = msguid("B04AEFB7-D19E-4A81-B789-25B8E9445913")


def vhdx_header(seq, log_guid, log_len, log_off, dw_guid, fw_guid=None):
    h = bytearray(4096)
    struct.pack_into("<IIQ", h, 0, 0x64616568, 0, seq)
    h[16:32] = fw_guid or uuid.uuid4().bytes
    h[32:48] = dw_guid
    h[48:64] = log_guid
    struct.pack_into("<HHIQ", h, 64, 0, 1, log_len, log_off)
    struct.pack_into("<I", h, 4, crc32c(h))
    return bytes(h)


def vhdx_region_table(entries):
    t = bytearray(65536)
    struct.pack_into("<IIII", t, 0, 0x69676572, 0, len(entries), 0)
    for i, (g, off, length) in enumerate(entries):
        t[16 + 32 * i:32 + 32 * i] = g
        struct.pack_into("<QII", t, 32 + 32 * i, off, length, 1)
    struct.pack_into("<I", t, 4, crc32c(t))
    return bytes(t)


def vhdx_locator(parent):
    kv = [(k, parent[k]) for k in ("parent_linkage", "relative_path", "absolute_win32_path")
          if k in parent]
    n = len(kv)
    head = bytearray(20 + 12 * n)
    head[0:16] = G_PARENT_TYPE
    struct.pack_into("<HH", head, 16, 0, n)
    blob = bytearray()
    base = len(head)
    for i, (k, v) in enumerate(kv):
        kb, vb = k.encode("utf-16-le"), v.encode("utf-16-le")
        struct.pack_into("<IIHH", head, 20 + 12 * i, base + len(blob), base + len(blob) + len(kb),
                         len(kb), len(vb))
        blob += kb + vb
    return bytes(head + blob)


class Vhdx:
    """A VHDX laid out as qimg and qemu-img lay them out: header section,
    log at 1 MiB, BAT, metadata, then blocks in the order they are given.
    parent: {"parent_linkage": "{GUID}", "relative_path": ...} makes a
    differencing disk (blocks then may carry sector bitmaps)."""

    def __init__(self, size, block_size=MIB, lss=512, log_len=MIB, parent=None,
                 data_write_guid=None, bat_at=None, items_at=65536):
        self.size, self.bs, self.lss, self.log_len = size, block_size, lss, log_len
        self.parent = parent
        self.chunk = (1 << 23) * lss // block_size
        nblocks = -(-size // block_size)
        if parent:
            self.entries = -(-nblocks // self.chunk) * (self.chunk + 1)
        else:
            self.entries = nblocks + (nblocks - 1) // self.chunk if nblocks else 0
        self.bat_off = bat_at or (MIB + log_len)
        self.bat_len = max(MIB, -(-self.entries * 8 // MIB) * MIB)
        self.meta_off = self.bat_off + self.bat_len
        self.data_off = self.meta_off + MIB
        self.bat = [0] * self.entries
        self.img = Sparse()
        self.dw_guid = data_write_guid or uuid.uuid4().bytes
        self.seq = 10
        self.log_guid = bytes(16)
        self.items_at = items_at  # the metadata items, from the region's start

    def payload_index(self, b):
        return b + b // self.chunk

    def bitmap_index(self, b):
        return (b // self.chunk) * (self.chunk + 1) + self.chunk

    def add_block(self, b, data, state=6):
        """Block b at the next MiB of the file (state 6 fully present, 7
        partially present)."""
        off = self.data_off
        self.data_off += self.bs
        self.img.put(off, bytes(data))
        self.bat[self.payload_index(b)] = off | state
        return off

    def set_state(self, b, state):
        self.bat[self.payload_index(b)] = state

    def add_bitmap(self, b, bits):
        """The sector bitmap of b's chunk: bits {sector of the chunk: 1}."""
        off = self.data_off
        self.data_off += MIB
        bm = bytearray(MIB)
        for k in bits:
            bm[k // 8] |= 1 << (k % 8)
        self.img.put(off, bm)
        self.bat[self.bitmap_index(b)] = off | 6
        return off

    def bat_bytes(self):
        return b"".join(struct.pack("<Q", e) for e in self.bat)

    def write(self, path, log_guid=None):
        img = self.img
        ident = bytearray(65536)
        ident[0:8] = b"vhdxfile"
        c = "hvimg".encode("utf-16-le")
        ident[8:8 + len(c)] = c
        img.put(0, ident)
        lg = log_guid if log_guid is not None else self.log_guid
        img.put(64 * 1024, vhdx_header(self.seq, lg, self.log_len, MIB, self.dw_guid))
        img.put(128 * 1024, vhdx_header(self.seq - 1, lg, self.log_len, MIB, self.dw_guid))
        rt = vhdx_region_table([(G_BAT, self.bat_off, self.bat_len),
                                (G_META, self.meta_off, MIB)])
        img.put(192 * 1024, rt)
        img.put(256 * 1024, rt)
        img.put(self.bat_off, self.bat_bytes())
        items = [(G_PARAMS, struct.pack("<II", self.bs, 2 if self.parent else 0), 4),
                 (G_SIZE, struct.pack("<Q", self.size), 6),
                 (G_PAGE83, uuid.uuid4().bytes, 6),
                 (G_LSS, struct.pack("<I", self.lss), 6),
                 (G_PSS, struct.pack("<I", 4096), 6)]
        if self.parent:
            items.append((G_LOCATOR, vhdx_locator(self.parent), 6))
        table = bytearray(65536)
        table[0:8] = b"metadata"
        struct.pack_into("<HH", table, 8, 0, len(items))
        off = self.items_at
        data = bytearray()
        for i, (g, blob, flags) in enumerate(items):
            table[32 + 32 * i:48 + 32 * i] = g
            struct.pack_into("<III", table, 48 + 32 * i, off + len(data), len(blob), flags)
            data += blob
        img.put(self.meta_off, table)
        img.put(self.meta_off + self.items_at, data)
        img.write(path, max(img.end(), self.data_off))


def log_entry(seq, guid, descs, flushed, last=None, tail=0, torn=None, bad_crc=False):
    """A log entry: descs [(file_offset, 4 KiB bytes)] or ("zero", off, len).
    torn: index of a data sector that did not reach the disk (left as zeros
    after the checksum of the whole entry was computed): a torn write.
    bad_crc: every sector complete, the checksum off by one: corruption."""
    data = [d for d in descs if d[0] != "zero"]
    nd = len(descs)
    ds = -(-(nd + 2) // 128)
    total = ds + len(data)
    e = bytearray(total * 4096)
    struct.pack_into("<IIIIQII", e, 0, 0x65676F6C, 0, total * 4096, tail, seq, nd, 0)
    e[32:48] = guid
    struct.pack_into("<QQ", e, 48, flushed, last if last is not None else flushed)
    k = 0
    for i, d in enumerate(descs):
        p = 64 + 32 * i
        if d[0] == "zero":
            struct.pack_into("<IIQQQ", e, p, 0x6F72657A, 0, d[2], d[1], seq)
            continue
        off, sec = d
        struct.pack_into("<I", e, p, 0x63736564)
        e[p + 4:p + 8] = sec[4092:4096]
        e[p + 8:p + 16] = sec[0:8]
        struct.pack_into("<QQ", e, p + 16, off, seq)
        s = (ds + k) * 4096
        struct.pack_into("<II", e, s, 0x61746164, seq >> 32)
        e[s + 8:s + 4092] = sec[8:4092]
        struct.pack_into("<I", e, s + 4092, seq & 0xFFFFFFFF)
        k += 1
    c = crc32c(e)
    struct.pack_into("<I", e, 4, (c + 1) & 0xFFFFFFFF if bad_crc else c)
    if torn is not None:
        s = (ds + torn) * 4096
        e[s:s + 4096] = bytes(4096)
    return bytes(e)


def inject_log(path, entries_at, guid):
    """Write log entries [(log offset, entry bytes)] into the image at path
    (log at the current header's offset) and make the header name guid."""
    with open(path, "r+b") as f:
        heads = []
        for off in (64 * 1024, 128 * 1024):
            f.seek(off)
            heads.append((off, bytearray(f.read(4096))))
        cur = max(heads, key=lambda h: struct.unpack_from("<Q", h[1], 8)[0])
        other = [h for h in heads if h is not cur][0]
        h = cur[1]
        log_off = struct.unpack_from("<Q", h, 72)[0]
        for pos, e in entries_at:
            f.seek(log_off + pos)
            f.write(e)
        seq = struct.unpack_from("<Q", h, 8)[0] + 1
        struct.pack_into("<Q", h, 8, seq)
        h[48:64] = guid
        struct.pack_into("<I", h, 4, 0)
        struct.pack_into("<I", h, 4, crc32c(h))
        f.seek(other[0])
        f.write(h)


def bat_offset(path):
    """The BAT region's offset in a VHDX (region table 1)."""
    with open(path, "rb") as f:
        f.seek(192 * 1024)
        t = f.read(65536)
    for i in range(struct.unpack_from("<I", t, 8)[0]):
        if t[16 + 32 * i:32 + 32 * i] == G_BAT:
            return struct.unpack_from("<Q", t, 32 + 32 * i)[0]
    raise SystemExit("no BAT region")


def data_write_guid(path):
    with open(path, "rb") as f:
        heads = []
        for off in (64 * 1024, 128 * 1024):
            f.seek(off)
            heads.append(f.read(4096))
    h = max(heads, key=lambda x: struct.unpack_from("<Q", x, 8)[0])
    return h[32:48]


def vhd_uuid(path):
    with open(path, "rb") as f:
        f.seek(-512, 2)
        return f.read(512)[68:84]
