#!/bin/bash
# At close, the image file grown ahead (qcow2/grow.c invariants 1 and 5) is
# cut back to the length qemu-io leaves (grow.c invariant 4): the end of the
# furthest write -- metadata and compressed clusters with their exact
# length, not rounded up to their cluster -- or of the furthest fresh guest
# cluster, whose unwritten part reads as zeros (as QEMU's zeroed COW
# areas).  One sequence of qemu-io commands in one open, run by qemu-io and
# by qimg io on fresh images: the files are byte for byte the same (length
# included) and check clean.  With a bitmap, close writes its directory
# last (exact length, as iotest 168 checks across tools).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

# same_file DESC CREATE-OPTS BITMAP IO-COMMANDS...
same_file() {
    local desc=$1 opts=$2 bitmap=$3 t
    local -a args=()
    shift 3
    for c in "$@"; do
        args+=(-c "$c")
    done
    for t in q m; do
        rm -f "$t.qcow2"
        "$QEMU_IMG" create -q -f qcow2 ${opts:+-o "$opts"} "$t.qcow2" 16M
        [ -z "$bitmap" ] || "$QEMU_IMG" bitmap --add "$t.qcow2" b1
    done
    "$QEMU_IO" "${args[@]}" q.qcow2 >/dev/null
    "$QIMG" io "${args[@]}" m.qcow2 >/dev/null
    assert_eq "$desc: length" "$(stat -c %s q.qcow2)" "$(stat -c %s m.qcow2)"
    assert_rc "$desc: the same bytes" 0 cmp q.qcow2 m.qcow2
    assert_rc "$desc: check" 0 "$QEMU_IMG" check -q m.qcow2
}

for bm in "" b1; do
    # a compressed cluster at the end, in the file grown by the first write
    same_file "compressed last ${bm:+(bitmap)}" "" "$bm" 'write -P 1 0 64k' \
        'write -c -P 2 1M 64k'
    same_file "compressed last, 4k clusters ${bm:+(bitmap)}" cluster_size=4096 "$bm" \
        'write -P 1 0 100k' 'write -c -P 2 1M 4k'
    same_file "compressed after 3M ${bm:+(bitmap)}" "" "$bm" 'write -P 3 0 3M' \
        'write -c -P 4 5M 64k'
    # a fresh cluster partly written last: the file reaches its end
    same_file "partial fresh cluster ${bm:+(bitmap)}" "" "$bm" 'write -P 5 0 4k'
    same_file "fresh after compressed ${bm:+(bitmap)}" "" "$bm" 'write -P 1 0 64k' \
        'write -c -P 2 1M 64k' 'write -P 6 2M 512'
done
finish
