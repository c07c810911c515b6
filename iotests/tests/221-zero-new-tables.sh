#!/bin/bash
# 221-zero-new-tables: zeroing a range whose L1 entries have no L2 table
# gives those tables their entries and links them in batches (qcow2/zero.c
# invariant 9; l2.c invariant 6: refcounts flushed, tables written and
# flushed, then the L1 sectors written and flushed), not one table and two
# flushes at a time as before (and as QEMU 7.2 does): growing a 1 MiB
# image with 512-byte clusters to 600 MiB over a longer backing file
# (resize.c invariant 3) wrote 19200 tables with 38492 fdatasyncs, 126 s
# here; qemu-img 7.2 takes 145 s.
#  - Against qemu-img on a copy (where it is quick enough): the same
#    output, and byte-identical images (the tables where it puts them, the
#    same entries): resize over a backing file (plain and extended L2),
#    an aligned `write -z` (qimg io against qemu-io), and discard over a
#    backing file (zero flags in new tables).
#  - Large, where qemu-img would take minutes: every batch linked (two at
#    512-byte clusters over 300 MiB: 8192 tables, then 1408), the new area
#    reads zeros where the backing file has data, qemu-img map has it all
#    zeros, qemu-img check is clean, and the fdatasyncs are counted under
#    strace: at most 20 (a batch costs three, and the refcount blocks each
#    batch makes a few; the one-table-at-a-time code made 19200 for the
#    tables and two per refcount block).
#  - Power loss: the crash-state explorer over the resize (a batch's
#    window between the tables' refcounts, the tables and the L1 sectors):
#    no state is corrupt for qemu-img check, every state reads the old
#    contents (the old size) or the new (zeros over the backing file's
#    data).
. "${0%/*}/../common.sh"
CRASH_STATES=${CRASH_STATES:-8}
. "$IOTESTS_DIR/crash/lib.sh"
requires qimg qemu-img qemu-io python3 strace

# base SIZE [WHO]: b.q and b.m (or b.WHO), SIZE of 0x5a (the backing
# file's data shows if a table is missing or lost)
base() {
    local who
    for who in ${2:-q m}; do
        rm -f "b.$who"
        qi create -q -f qcow2 "b.$who" "$1"
        qio "b.$who" "write -P 0x5a 0 $1"
    done
}
# overlay OPTS SIZE: t.q over b.q and t.m over b.m
overlay() {
    local who
    for who in q m; do
        rm -f "t.$who"
        qi create -q -f qcow2 -o "$1" -b "b.$who" -F qcow2 "t.$who" "$2"
    done
}
# same_image DESC: t.m is t.q byte for byte (the backing file's name aside)
same_image() {
    sed 's/b\.q/b.m/' t.q >t.qm
    assert_rc "$1: byte-identical to qemu-img's" 0 cmp t.qm t.m
    assert_rc "$1: check" 0 "$QEMU_IMG" check t.m
}

base 4M
for opts in cluster_size=512 cluster_size=16k,extended_l2=on; do
    desc="resize 64k->3M, $opts"
    overlay "$opts" 64k
    "$QEMU_IMG" resize -f qcow2 t.q 3M >q.out 2>&1
    "$QIMG" resize -f qcow2 t.m 3M >m.out 2>&1
    assert_eq "$desc: output" "$(<q.out)" "$(<m.out)"
    same_image "$desc"
done
# a guest zero write and a discard over ranges without tables; with
# partial head and tail clusters (the write path's, around the batch) the
# same contents and a clean check: qimg writes the tail before the whole
# clusters, QEMU after them, so the tail's table lands elsewhere
overlay cluster_size=512 4M
assert_rc "write -z: qemu-io" 0 "$QEMU_IO" -c "write -z 65536 3M" t.q
assert_rc "write -z: qimg io" 0 "$QIMG" io -c "write -z 65536 3M" t.m
same_image "write -z"
overlay cluster_size=512 4M
assert_rc "write -z unaligned: qemu-io" 0 "$QEMU_IO" -c "write -z 1000 3000000" t.q
assert_rc "write -z unaligned: qimg io" 0 "$QIMG" io -c "write -z 1000 3000000" t.m
assert_rc "write -z unaligned: same contents" 0 "$QEMU_IMG" compare t.q t.m
assert_rc "write -z unaligned: check" 0 "$QEMU_IMG" check t.m
overlay cluster_size=512 4M
assert_rc "discard: qemu-io" 0 "$QEMU_IO" -c "discard 65536 3M" t.q
assert_rc "discard: qimg io" 0 "$QIMG" io -c "discard 65536 3M" t.m
same_image "discard"

# Large: two batches (8192 tables of 512 bytes each, then the rest).
rm -f b.q t.q t.m
# (the data only where it is read below: 600 MiB of it would cost more
# than the rest of the test)
qi create -q -f qcow2 b.m 300M
qio b.m "write -P 0x5a 1M 1M" "write -P 0x5a 255M 2M" "write -P 0x5a 298M 2M"
qi create -q -f qcow2 -o cluster_size=512 -b b.m -F qcow2 t.m 1M
# (--seccomp-bpf: only the syncs stop the process; tracing its ~10000
# writes too cost more CPU than the resize)
strace --seccomp-bpf -f -e trace=fdatasync,fsync -o st.txt "$QIMG" resize -f qcow2 t.m 300M \
    >m.out 2>&1
assert_eq "resize 1M->300M: output" "Image resized." "$(<m.out)"
syncs=$(grep -c 'sync(' st.txt)
assert_rc "resize 1M->300M: $syncs fdatasyncs, at most 20" 0 test "$syncs" -le 20
assert_rc "resize 1M->300M: check" 0 "$QEMU_IMG" check t.m
assert_rc "resize 1M->300M: reads zeros past the old size" 0 "$QEMU_IO" \
    -c "read -P 0 1M 1M" -c "read -P 0 255M 2M" -c "read -P 0 298M 2M" t.m
assert_eq "resize 1M->300M: map" \
    "$("$QEMU_IMG" map --output=json t.m | sed -n 's/.*"length": \([0-9]*\), "depth": \([0-9]*\), "present": \([a-z]*\), "zero": \([a-z]*\).*/\1 \2 \3 \4/p')" \
    "1048576 1 false true
313524224 0 true true"
rm -f b.m t.m

# Power loss during a batch: 8 tables, a short log, so that make test's 8
# states cover its windows.
d=$SCRATCH/crash
mkdir -p "$d"
qi create -q -f qcow2 "$d/b.qcow2" 320k
qio "$d/b.qcow2" "write -P 0x5a 0 320k"
qi create -q -f qcow2 -o cluster_size=512 -b b.qcow2 -F qcow2 "$d/img.qcow2" 64k
qio "$d/img.qcow2" "write -P 0x31 0 32k"
python3 - "$d/new.raw" <<'PY'
import sys
with open(sys.argv[1], "wb") as f:  # the old 64 KiB, then zeros to 320
    f.write(b"\x31" * 32768 + b"\x5a" * 32768)
    f.truncate(320 << 10)
PY
crash_op resize-batches "$d" --expect-raw "$d/new.raw" --link "b.qcow2=$d/b.qcow2" \
    -- resize @IMG@ 320k
crash_summary
finish
