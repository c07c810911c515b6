#!/bin/bash
# 210-resize-over-backing: growing an image whose backing file is longer
# than its old size, as qemu-img 7.2 does it (QEMU iotest 274; qcow2
# resize.c invariant 3): after the preallocation, the whole new area up to
# the new size is zeroed -- zero clusters without a host cluster (off),
# preallocated clusters kept as zero clusters (metadata), the last partial
# cluster whole -- and falloc/full's clusters, which read as zeros
# already, are left as data.  qemu-img map (JSON, with host offsets) must
# match qemu-img's on a copy, the new area reads as zeros, check is clean.
# qimg zeroed only up to the backing file's end, and before preallocating
# (metadata: zero clusters without offsets, then data clusters; falloc:
# an L2 table before the data, every offset one cluster later).
#  - Without a backing file, the unallocated cluster holding an unaligned
#    old end is preallocated too (QEMU iotest 125; prealloc.c invariant 7).
#  - Where qimg differs on purpose: a v2 image (compat=0.10) with a longer
#    backing file grows with zeros written, where QEMU fails ("Failed to
#    zero out new clusters"); extended L2 with falloc/full zeroes the
#    preallocated clusters (QEMU allocates their subclusters): both read
#    zeros in the new area and check clean.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

# base size, old size, new size, data offset in the base, mode, create -o
cases=(
    "6G 1G 8G 5G off"
    "32G 30G 33G 31G metadata"
    "10M 5M 15M 9M falloc"
    "16M 8M 12M 11M full"
    "384k 253k 512k 253k off"
    "400k 256k 512k 336k off"
    "512k 256k 500k 436k off"
    "4M 1M 8M 3M off cluster_size=4096"
    "4M 1M 8M 3M metadata cluster_size=4096"
    "4M 2M 3M 2M off"
    "4M 1M 8M 3M off extended_l2=on"
    "4M 1M 8M 3M metadata extended_l2=on"
)
for c in "${cases[@]}"; do
    read -r bsz old new off mode opts <<<"$c"
    desc="$mode $bsz/$old->$new${opts:+ $opts}"
    for who in q m; do
        rm -f "b.$who" "t.$who"
        qi create -q -f qcow2 "b.$who" "$bsz"
        qi create -q -f qcow2 ${opts:+-o "$opts"} -b "b.$who" -F qcow2 "t.$who" "$old"
        qio "b.$who" "write -P 1 $off 64k"
    done
    "$QEMU_IMG" resize -f qcow2 --preallocation "$mode" t.q "$new" >q.out 2>&1
    "$QIMG" resize -f qcow2 --preallocation "$mode" t.m "$new" >m.out 2>&1
    assert_eq "$desc: output" "$(<q.out)" "$(<m.out)"
    assert_eq "$desc: map" "$("$QEMU_IMG" map --output=json t.q | sed 's/b\.q/b.m/')" \
        "$("$QEMU_IMG" map --output=json t.m)"
    assert_rc "$desc: the new area reads zeros" 0 "$QEMU_IO" -c "read -P 0 $off 64k" t.m
    assert_rc "$desc: check" 0 "$QEMU_IMG" check t.m
done

# Without a backing file, from an unaligned size (QEMU iotest 125): the
# cluster holding the old end is preallocated too when it is unallocated
# (prealloc.c invariant 7), so writes into it later allocate nothing;
# qimg started at the next whole cluster, and the writes grew the file.
# the space its data holds (alloc_of, extents after a sync; not st_blocks,
# which also counts ext4's extent-tree blocks: the write into an unwritten
# extent below splits it, and a new tree block made st_blocks grow)
host_size() { alloc_of "$1"; }
for cs in 512 64k; do
    for grow in 16 48 80; do
        for mode in metadata falloc full; do
            desc="no backing, cluster $cs, +${grow}K $mode"
            for who in q m; do
                rm -f "t.$who"
                qi create -q -f qcow2 -o "cluster_size=$cs" "t.$who" 2048000
            done
            "$QEMU_IMG" resize -f qcow2 --preallocation=$mode t.q "+${grow}K" >q.out 2>&1
            "$QIMG" resize -f qcow2 --preallocation=$mode t.m "+${grow}K" >m.out 2>&1
            assert_eq "$desc: output" "$(<q.out)" "$(<m.out)"
            assert_eq "$desc: map" "$("$QEMU_IMG" map --output=json t.q)" \
                "$("$QEMU_IMG" map --output=json t.m)"
            qio t.m "write 0 2048000"
            h1=$(host_size t.m) l1=$(stat -c %s t.m)
            qio t.m "write 2048000 ${grow}K"
            assert_eq "$desc: the file did not grow" "$l1" "$(stat -c %s t.m)"
            [ $mode = metadata ] ||
                assert_rc "$desc: nothing allocated" 0 test "$(host_size t.m)" -le "$h1"
            assert_rc "$desc: check" 0 "$QEMU_IMG" check t.m
        done
    done
done

# deliberate: v2, and extended L2 with falloc/full (contents only); an
# unaligned old size with metadata/falloc/full (qimg preallocates from the
# first whole cluster and zeroes the head through the write path, which
# copies the backing file's part of the cluster; QEMU preallocates the head
# cluster without that copy, so its placement differs)
bytes() { numfmt --from=iec "${1^^}"; }
for c in "10M 5M 15M 9M off compat=0.10" "10M 5M 15M 9M metadata compat=0.10" \
    "10M 5M 15M 9M falloc extended_l2=on" "10M 5000k 15M 9M full extended_l2=on" \
    "10M 5000k 15M 9M falloc" "512k 253k 500k 436k metadata" "10M 5000k 15M 9M full"; do
    read -r bsz old new off mode opts <<<"$c"
    desc="$mode $bsz/$old->$new $opts"
    rm -f b.m t.m
    qi create -q -f qcow2 b.m "$bsz"
    qi create -q -f qcow2 ${opts:+-o "$opts"} -b b.m -F qcow2 t.m "$old"
    qio b.m "write -P 1 0 $bsz"
    assert_rc "$desc: resize" 0 "$QIMG" resize -f qcow2 --preallocation "$mode" t.m "$new"
    assert_rc "$desc: the new area reads zeros" 0 "$QEMU_IO" -c "read -P 1 0 $(bytes "$old")" \
        -c "read -P 0 $old $(($(bytes "$new") - $(bytes "$old")))" t.m
    assert_rc "$desc: check" 0 "$QEMU_IMG" check t.m
done
finish
