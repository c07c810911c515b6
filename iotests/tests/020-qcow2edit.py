#!/usr/bin/env python3
"""Byte-level edits of qcow2 images for the check/repair iotests (020-029).

Usage: 020-qcow2edit.py IMAGE COMMAND [ARGS...]; numbers may be hex (0x...).
A script that imports this file runs a command with edit(IMAGE, COMMAND,
ARGS...) and reads the layout through Image.

  info                        print the layout as NAME=VALUE lines (shell eval)
  poke OFFSET FMT VALUE       write VALUE packed big-endian as struct FMT
                              (B, H, I, Q) at OFFSET
  setref CLUSTER VALUE        set the on-disk refcount of CLUSTER
  getref CLUSTER              print the on-disk refcount of CLUSTER
  l1 INDEX [VALUE]            print (or set) active L1 entry INDEX
  l2 GUEST_OFFSET [VALUE]     print (or set) the L2 entry mapping GUEST_OFFSET
  l2off GUEST_OFFSET          print the file offset of that L2 entry
  reftable INDEX [VALUE]      print (or set) refcount table entry INDEX
  fake-snapshot NAME [EXTRA]  append a snapshot that shares the active L1
                              (copied to a new cluster at the end of the file),
                              with EXTRA bytes of extra data (default 24) and
                              without raising any refcount except for the new
                              L1 copy and snapshot table clusters
  snapfield INDEX FIELD [VALUE] print (or set) a field of snapshot entry INDEX:
                              l1_offset l1_size extra_size id_len name_len
  layout                      print the file's length, the bitmap directory
                              ("directory OFFSET SIZE"), each bitmap with its
                              table and the table's non-zero entries, and the
                              refcount of every cluster of the file
"""
import struct
import sys


def num(s):
    return int(s, 0)


class Image:
    def __init__(self, path):
        self.path = path
        self.f = open(path, 'r+b')
        h = self.read(0, 112)
        (self.magic, self.version, self.backing_off, self.backing_size,
         self.cluster_bits, self.size, self.crypt, self.l1_size,
         self.l1_offset, self.rt_offset, self.rt_clusters, self.nb_snapshots,
         self.snapshots_offset) = struct.unpack('>IIQIIQIIQQIIQ', h[:72])
        if self.version >= 3:
            (self.incompat, self.compat, self.autoclear, self.refcount_order,
             self.header_length) = struct.unpack('>QQQII', h[72:104])
        else:
            self.incompat = self.compat = self.autoclear = 0
            self.refcount_order, self.header_length = 4, 72
        self.cs = 1 << self.cluster_bits
        self.extl2 = bool(self.incompat & 16)
        self.l2_entry = 16 if self.extl2 else 8
        self.l2_entries = self.cs // self.l2_entry
        self.rbits = 1 << self.refcount_order
        self.rb_entries = self.cs * 8 // self.rbits

    def read(self, off, n):
        self.f.seek(off)
        d = self.f.read(n)
        return d + b'\0' * (n - len(d))

    def write(self, off, data):
        self.f.seek(off)
        self.f.write(data)

    def u64(self, off):
        return struct.unpack('>Q', self.read(off, 8))[0]

    def put64(self, off, v):
        self.write(off, struct.pack('>Q', v & 0xffffffffffffffff))

    def file_size(self):
        self.f.seek(0, 2)
        return self.f.tell()

    def refblock_of(self, cluster):
        idx = cluster // self.rb_entries
        rb = self.u64(self.rt_offset + 8 * idx) & ~0x1ff
        if not rb:
            raise SystemExit('no refblock for cluster %d' % cluster)
        return rb, cluster % self.rb_entries

    def getref(self, cluster):
        rb, i = self.refblock_of(cluster)
        w = self.rbits
        if w < 8:
            b = self.read(rb + i * w // 8, 1)[0]
            return (b >> (i * w % 8)) & ((1 << w) - 1)
        return int.from_bytes(self.read(rb + i * w // 8, w // 8), 'big')

    def setref(self, cluster, v):
        rb, i = self.refblock_of(cluster)
        w = self.rbits
        if w < 8:
            off = rb + i * w // 8
            b = self.read(off, 1)[0]
            sh = i * w % 8
            m = ((1 << w) - 1) << sh
            b = (b & ~m) | ((v << sh) & m)
            self.write(off, bytes([b]))
        else:
            self.write(rb + i * w // 8, v.to_bytes(w // 8, 'big'))

    def l2_entry_offset(self, guest):
        cl = guest >> self.cluster_bits
        l1i, l2i = divmod(cl, self.l2_entries)
        l2 = self.u64(self.l1_offset + 8 * l1i) & 0x00fffffffffffe00
        if not l2:
            raise SystemExit('guest offset %#x has no L2 table' % guest)
        return l2 + l2i * self.l2_entry

    def snapshot_entries(self):
        off = self.snapshots_offset
        out = []
        for _ in range(self.nb_snapshots):
            off = (off + 7) & ~7
            e = self.read(off, 40)
            l1o, l1s, idl, nl = struct.unpack('>QIHH', e[:16])
            eds = struct.unpack('>I', e[36:40])[0]
            out.append(off)
            off += 40 + eds + idl + nl
        return out, off

    def alloc_end(self, n):
        end = (self.file_size() + self.cs - 1) // self.cs * self.cs
        self.f.truncate(end + n * self.cs)
        return end

    def bitmap_directory(self):
        """(offset, size, nb) of the bitmaps extension, or None."""
        off = self.header_length
        while True:
            t, ln = struct.unpack('>II', self.read(off, 8))
            if t == 0:
                return None
            if t == 0x23852875:
                nb, _, dsz, doff = struct.unpack('>IIQQ', self.read(off + 8, 24))
                return doff, dsz, nb
            off += 8 + ((ln + 7) & ~7)

    def layout(self):
        print('length', self.file_size())
        bd = self.bitmap_directory()
        if bd:
            p = bd[0]
            print('directory', bd[0], bd[1])
            for _ in range(bd[2]):
                to, ts, fl, _, _, nl, el = struct.unpack('>QIIBBHI', self.read(p, 24))
                name = self.read(p + 24 + el, nl).decode()
                ents = struct.unpack('>%dQ' % ts, self.read(to, 8 * ts))
                print('bitmap', name, 'flags', fl, 'table', to, ts, [e for e in ents if e])
                p += (24 + el + nl + 7) // 8 * 8
        for c in range((self.file_size() + self.cs - 1) // self.cs):
            print('cluster', c, 'refcount', self.getref(c))

    def fake_snapshot(self, name, extra):
        # copy of the active L1
        l1 = self.read(self.l1_offset, self.l1_size * 8)
        l1_clusters = max(1, (len(l1) + self.cs - 1) // self.cs)
        l1_copy = self.alloc_end(l1_clusters)
        self.write(l1_copy, l1)
        for c in range(l1_clusters):
            self.setref(l1_copy // self.cs + c, 1)
        # new table = old entries + the new one
        old, end = self.snapshot_entries()
        old_bytes = self.read(self.snapshots_offset, end - self.snapshots_offset) \
            if self.nb_snapshots else b''
        sid = str(self.nb_snapshots + 1).encode()
        ent = struct.pack('>QIHHIIQII', l1_copy, self.l1_size, len(sid),
                          len(name), 1700000000, 0, 0, 0, extra)
        ex = struct.pack('>QQq', 0, self.size, -1)
        ex = (ex + b'\0' * extra)[:extra]
        ent += ex + sid + name.encode()
        table = old_bytes + b'\0' * ((8 - len(old_bytes) % 8) % 8) + ent
        table += b'\0' * ((8 - len(table) % 8) % 8)
        t_clusters = (len(table) + self.cs - 1) // self.cs
        toff = self.alloc_end(t_clusters)
        self.write(toff, table)
        for c in range(t_clusters):
            self.setref(toff // self.cs + c, 1)
        self.write(60, struct.pack('>IQ', self.nb_snapshots + 1, toff))


def command(img, cmd, args):
    """Run COMMAND with ARGS (strings) on IMG, as the command line does."""
    if cmd == 'info':
        for k in ('version', 'cluster_bits', 'cs', 'size', 'l1_size',
                  'l1_offset', 'rt_offset', 'rt_clusters', 'nb_snapshots',
                  'snapshots_offset', 'incompat', 'refcount_order',
                  'header_length'):
            print('%s=%d' % (k, getattr(img, k)))
        if img.nb_snapshots:
            for i, off in enumerate(img.snapshot_entries()[0]):
                print('snap%d=%d' % (i, off))
    elif cmd == 'poke':
        img.write(num(args[0]), struct.pack('>' + args[1], num(args[2])))
    elif cmd == 'setref':
        img.setref(num(args[0]), num(args[1]))
    elif cmd == 'getref':
        print(img.getref(num(args[0])))
    elif cmd in ('l1', 'reftable'):
        base = img.l1_offset if cmd == 'l1' else img.rt_offset
        off = base + 8 * num(args[0])
        if len(args) > 1:
            img.put64(off, num(args[1]))
        else:
            print('%#x' % img.u64(off))
    elif cmd == 'l2':
        off = img.l2_entry_offset(num(args[0]))
        if len(args) > 1:
            img.put64(off, num(args[1]))
        else:
            print('%#x' % img.u64(off))
    elif cmd == 'l2off':
        print(img.l2_entry_offset(num(args[0])))
    elif cmd == 'fake-snapshot':
        img.fake_snapshot(args[0], num(args[1]) if len(args) > 1 else 24)
    elif cmd == 'snapfield':
        off = img.snapshot_entries()[0][num(args[0])]
        fields = {'l1_offset': (0, 'Q'), 'l1_size': (8, 'I'), 'id_len': (12, 'H'),
                  'name_len': (14, 'H'), 'extra_size': (36, 'I')}
        o, fmt = fields[args[1]]
        if len(args) > 2:
            img.write(off + o, struct.pack('>' + fmt, num(args[2])))
        else:
            print(struct.unpack('>' + fmt, img.read(off + o, struct.calcsize(fmt)))[0])
    elif cmd == 'layout':
        img.layout()
    else:
        raise SystemExit('unknown command ' + cmd)


def edit(path, cmd, *args):
    """A command on the image at PATH, its edits written when it returns
    (for a script that imports this file: one python3 for many edits)."""
    img = Image(path)
    try:
        command(img, cmd, [str(a) for a in args])
    finally:
        img.f.close()


def main():
    edit(sys.argv[1], sys.argv[2], *sys.argv[3:])


if __name__ == '__main__':
    main()
