"""The crash-state explorer's ordering check of a whole log (crash.py
explore --check-order): qcow2/write.c invariant 1, data before L2, read
off the log itself rather than off sampled states.

An L2 entry that a write of the log points at a host cluster it did not
point at before (a link) must come after a flush that covered the first
write into that cluster since it was last unlinked (or that write was
FUA): otherwise a power loss just before that flush completes may keep
the entry and lose the data, and the guest reads the cluster's old bytes
(another offset's data, or backing data replaced by zeros).  The power-
loss states (states.py) find such a window only when a state cuts inside
it, keeps the L2 write, drops the data write, and the lost data reads
differently from what the judge allows; this check sees every window, in
one pass.

Only the first write: the log cannot tell the rest of an allocation's
writes (the writes a ring plan joined, write-ring.c) from writes in place
after the link (the fast path, not ordered: losing one reads what was
there before, as losing any write not flushed yet does) -- and a link
waits for its first write in any case (write.c invariant 1, write-ring.c
invariant 2).  So a flush before an L2 write that covers the allocation's
first write but not a write into the cluster that completed later is no
fault: the check says nothing about it.

The L2 tables are those the active L1 table names in the image before
the run (--base) or after it (--image): the workloads these logs come
from make no snapshots and free no L2 table, so no cluster is an L2
table at one time and data at another.
"""
import bisect
import struct

from crashlog import W_AUX_FUA, W_FLUSH, W_WRITE, W_ZERO

_COMPRESSED = 1 << 62
_HOST_MASK = 0x00FFFFFFFFFFFE00


def _geometry(head):
    """(cluster size, L2 entry size, L1 offset, L1 entries) of a qcow2
    header, or None."""
    if len(head) < 72 or head[:4] != b"QFI\xfb":
        return None
    version, = struct.unpack_from(">I", head, 4)
    cluster_bits, = struct.unpack_from(">I", head, 20)
    l1_size, = struct.unpack_from(">I", head, 36)
    l1_off, = struct.unpack_from(">Q", head, 40)
    incompat = struct.unpack_from(">Q", head, 72)[0] if version >= 3 and len(head) >= 80 else 0
    if not 9 <= cluster_bits <= 21:
        return None
    return 1 << cluster_bits, 16 if incompat & (1 << 4) else 8, l1_off, l1_size


def l2_tables(read):
    """(cluster size, entry size, set of L2 table offsets) of the image
    read(off, len) returns, or None if it is not a qcow2 image."""
    geo = _geometry(read(0, 512))
    if geo is None:
        return None
    cs, esize, l1_off, l1_size = geo
    l1 = read(l1_off, 8 * l1_size)
    tables = set()
    for i in range(len(l1) // 8):
        off = struct.unpack_from(">Q", l1, 8 * i)[0] & _HOST_MASK & ~(cs - 1)
        if off:
            tables.add(off)
    return cs, esize, tables


def _file_reader(path):
    f = open(path, "rb")

    def read(off, n):
        f.seek(off)
        return f.read(n)
    return f, read


def check_data_before_l2(entries, image, base):
    """Problems (strings) with write.c invariant 1 in the log, and the
    number of links checked.  image: the image file after the run; base:
    its contents before (bytes)."""
    f, read = _file_reader(image)
    try:
        after = l2_tables(read)
    finally:
        f.close()
    before = l2_tables(lambda off, n: base[off:off + n]) if base else None
    if after is None:
        return [], 0
    cs, esize, tables = after
    if before is not None:
        tables |= before[2]
    order = sorted(tables)
    # the L2 tables' contents with every write of the log so far
    shadow = {t: bytearray(base[t:t + cs].ljust(cs, b"\0")) for t in order}
    first = {}  # host cluster -> index of the first write (or zeroing) since unlinked
    covered = 0  # entries below this index are durable (the newest flush's cover)
    problems, links = [], 0
    for e in entries:
        if e.path != image:
            continue
        if e.type == W_FLUSH:
            covered = max(covered, e.aux)
            continue
        if e.type not in (W_WRITE, W_ZERO) or e.len == 0:
            continue
        a, b = e.off, e.off + e.len
        k = bisect.bisect_right(order, a - cs)  # the first table that may overlap
        while k < len(order) and order[k] < b:
            t = order[k]
            k += 1
            lo, hi = max(a, t), min(b, t + cs)
            data = e.data[lo - a:hi - a] if e.type == W_WRITE else bytes(hi - lo)
            if e.type == W_WRITE:
                links += _links(shadow[t], t, lo, data, esize, cs, first, covered, e.index,
                                problems)
            shadow[t][lo - t:hi - t] = data
        if e.type == W_WRITE and e.aux & W_AUX_FUA:
            continue  # durable by itself (the writes before it are not)
        for c in range(a - a % cs, b, cs):
            first.setdefault(c, e.index)
    return problems, links


def _links(table, t, lo, data, esize, cs, first, covered, index, problems):
    """Check the entries that data, written at file offset lo into the L2
    table at t (its contents before: table), changes; returns how many
    links it makes."""
    links = 0
    for pos in range(lo + (-(lo - t)) % esize, lo + len(data) - esize + 1, esize):
        new = _host(struct.unpack_from(">Q", data, pos - lo)[0], cs)
        old = _host(struct.unpack_from(">Q", table, pos - t)[0], cs)
        if new == old:
            continue
        first.pop(old, None)  # unlinked: its next write is a new allocation's
        if not new:
            continue
        links += 1
        j = first.get(new)
        if j is not None and j >= covered:
            problems.append("entry %d: the L2 entry at 0x%x links host cluster 0x%x, whose "
                            "first write (entry %d) no flush covered yet" % (index, pos, new, j))
    return links


def _host(entry, cs):
    """The host cluster an L2 entry points at (0: none, or compressed)."""
    return 0 if entry & _COMPRESSED else entry & _HOST_MASK & ~(cs - 1)
