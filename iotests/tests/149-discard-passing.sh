#!/bin/bash
# Space given back to the image file when qcow2 clusters are freed (qcow2
# alloc.c invariant 9, QEMU's discard passing), against qemu-img/qemu-io
# 7.2 on copies of the same qemu-img-made image: the file's disk usage
# after a shrink (QEMU iotest 250, smaller), a snapshot deletion, a commit
# that empties the overlay, and qemu-io's discard and unmapping zero write,
# each with QEMU's defaults and with pass-discard-request, -snapshot and
# -other set; freed clusters reused before the file grows; every result
# passes qemu-img check.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

# The space a file's data holds, from its extents (alloc_of: not du, which
# also counts ext4's extent-tree blocks and delayed allocation's
# reservations, and flipped a comparison when ext4 split or merged extents).
space_of() { alloc_of "$1"; }
# in whole 64 KiB clusters, those of the file holding any space: the file
# system's own 4 KiB differences (where the last write of a table ended) are
# not what is compared here
clusters_of() { alloc_of --unit 65536 "$1"; }
clean() {
    assert_rc "$1: qemu-img check" 0 "$QEMU_IMG" check -q "$2"
}

# 1. QEMU 250: data at both ends, the image preallocated so the shrink
#    cannot simply cut the file: the clusters freed in the middle go back.
qi create -q -f qcow2 -o cluster_size=64k,preallocation=metadata base.qcow2 32M
"$QEMU_IO" -c 'discard 0 640k' -c 'discard 31M 640k' -c 'write 31M 640k' \
    -c 'write 0 640k' base.qcow2 >/dev/null || exit 1
cp --sparse=always base.qcow2 q.qcow2
cp --sparse=always base.qcow2 m.qcow2
before=$(space_of q.qcow2)
"$QEMU_IMG" resize -q --shrink q.qcow2 320k || exit 1
assert_rc "shrink" 0 "$QIMG" resize -q --shrink m.qcow2 320k
# (byte for byte the same file; qimg may give back more: it also leaves
# the unused part of a zeroed table unallocated)
assert_rc "shrink: the same file" 0 cmp q.qcow2 m.qcow2
q_back=$((before - $(space_of q.qcow2))) m_back=$((before - $(space_of m.qcow2)))
assert_eq "shrink: disk usage given back ($m_back, qemu-img $q_back)" 1 \
    "$((m_back >= q_back && m_back >= 10 * 65536))"
assert_eq "shrink: map" "$("$QEMU_IMG" map --output=json q.qcow2)" \
    "$("$QEMU_IMG" map --output=json m.qcow2)"
clean shrink m.qcow2

# 1b. The same discards and writes with writeback, as QEMU's check runs
#    qemu-io (no flush between them): the writes still reuse the discarded
#    clusters (qcow2 alloc.c invariant 10), as qemu-io's do.
for t in q m; do
    qi create -q -f qcow2 -o cluster_size=64k,preallocation=metadata w$t.qcow2 32M
done
wb=(--cache writeback -c 'discard 0 1M' -c 'discard 31M 1M' -c 'write 31M 1M' -c 'write 0 1M')
"$QEMU_IO" "${wb[@]}" wq.qcow2 >/dev/null || exit 1
assert_rc "writeback reuse" 0 "$QIMG" io "${wb[@]}" wm.qcow2
assert_eq "writeback reuse: map" "$("$QEMU_IMG" map --output=json wq.qcow2)" \
    "$("$QEMU_IMG" map --output=json wm.qcow2)"
assert_eq "writeback reuse: file size" "$(stat -c %s wq.qcow2)" "$(stat -c %s wm.qcow2)"
clean "writeback reuse" wm.qcow2

# 2. snapshot -d: the snapshot's own clusters go back (pass-discard-snapshot,
#    default on), or stay with pass-discard-snapshot=off.
qi create -q -f qcow2 base.qcow2 16M
"$QEMU_IO" -c 'write -P 1 0 4M' base.qcow2 >/dev/null || exit 1
qi snapshot -c s1 base.qcow2
"$QEMU_IO" -c 'write -P 2 0 3M' base.qcow2 >/dev/null || exit 1
for o in "" ",pass-discard-snapshot=off" ",pass-discard-snapshot=on"; do
    cp --sparse=always base.qcow2 q.qcow2
    cp --sparse=always base.qcow2 m.qcow2
    before=$(clusters_of q.qcow2)
    "$QEMU_IMG" snapshot -d s1 --image-opts "driver=qcow2,file.filename=q.qcow2$o" || exit 1
    assert_rc "snapshot -d [$o]" 0 "$QIMG" snapshot -d s1 --image-opts \
        "driver=qcow2,file.filename=m.qcow2$o"
    assert_eq "snapshot -d [$o]: disk usage given back, in clusters" \
        "$((before - $(clusters_of q.qcow2)))" "$((before - $(clusters_of m.qcow2)))"
    clean "snapshot -d [$o]" m.qcow2
done
# (and the default gives something back: the test can see a difference)
cp --sparse=always base.qcow2 m.qcow2
before=$(space_of m.qcow2)
"$QIMG" snapshot -d s1 m.qcow2
assert_eq "snapshot -d gives 1 MiB back" 1 "$(( (before - $(space_of m.qcow2)) >= 1048576 ))"

# 3. commit empties the overlay (QEMU's make_empty: a snapshot-kind discard).
qi create -q -f qcow2 b.qcow2 16M
for t in q m; do
    qi create -q -f qcow2 -b b.qcow2 -F qcow2 o$t.qcow2
    "$QEMU_IO" -c 'write -P 3 1M 4M' o$t.qcow2 >/dev/null || exit 1
done
"$QEMU_IMG" commit -q oq.qcow2 || exit 1
cp --sparse=always b.qcow2 bq.qcow2
qi create -q -f qcow2 b.qcow2 16M
assert_rc "commit" 0 "$QIMG" commit -q om.qcow2
assert_eq "commit: the emptied overlay's disk usage, in clusters" "$(clusters_of oq.qcow2)" \
    "$(clusters_of om.qcow2)"
clean commit om.qcow2

# 4. qemu-io: discard and write -z -u free clusters (pass-discard-request,
#    default on); pass-discard-other also gives back replaced metadata.  The
#    space given back: the disk usage after the writes alone, less after the
#    writes and the discards, per tool.
writes=(-c 'write 0 4M' -c 'write 8M 1M')
frees=(-c 'write 0 4M' -c 'discard 1M 2M' -c 'write -z -u 3M 1M' -c 'write 8M 1M')
for o in "" ",pass-discard-request=off" ",pass-discard-request=on,pass-discard-other=on"; do
    for t in q m; do qi create -q -f qcow2 w$t.qcow2 16M; qi create -q -f qcow2 d$t.qcow2 16M; done
    "$QEMU_IO" -c "open -o driver=qcow2$o wq.qcow2" "${writes[@]}" >/dev/null || exit 1
    "$QEMU_IO" -c "open -o driver=qcow2$o dq.qcow2" "${frees[@]}" >/dev/null || exit 1
    assert_rc "qemu-io [$o]" 0 "$QIMG" io -c "open -o driver=qcow2$o wm.qcow2" "${writes[@]}"
    assert_rc "qemu-io [$o]" 0 "$QIMG" io -c "open -o driver=qcow2$o dm.qcow2" "${frees[@]}"
    assert_eq "qemu-io [$o]: disk usage given back, in clusters" \
        "$(($(clusters_of wq.qcow2) - $(clusters_of dq.qcow2)))" \
        "$(($(clusters_of wm.qcow2) - $(clusters_of dm.qcow2)))"
    assert_eq "qemu-io [$o]: map" "$("$QEMU_IMG" map --output=json dq.qcow2)" \
        "$("$QEMU_IMG" map --output=json dm.qcow2)"
    clean "qemu-io [$o]" dm.qcow2
done
same_as_qemu_io "a bad pass-discard value" -c 'open -o driver=qcow2,pass-discard-other=x dm.qcow2'

finish
