#!/bin/bash
# 211-extended-l2-qemu-cow: extended L2 entries after copy-on-write and
# zero writes over compressed clusters, as QEMU 7.2 leaves them (QEMU
# iotest 271): the L2 entries (host offsets and subcluster bitmaps) of an
# image written by qemu-io and of a copy written by qimg io must be the
# same, the data equal and check clean.
#  - COW of a cluster that moves (snapshot, compressed): every subcluster
#    from the first to the last of those written or allocated before
#    becomes allocated (qcow2 write.c invariant 7); qimg allocated only
#    those, leaving the ones between unallocated.
#  - A zero write whose subcluster-aligned part starts or ends inside a
#    compressed cluster writes that whole part as data, its whole clusters
#    too (zero.c invariant 8); qimg zeroed the whole clusters (zero bits).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

# l2 IMG: "index entry bitmap" for every non-zero entry of the first L2 table
l2() {
    python3 - "$1" <<'PY'
import struct, sys
d = open(sys.argv[1], 'rb').read()
l1_size, l1_off = struct.unpack('>IQ', d[36:48])
l2 = struct.unpack('>Q', d[l1_off:l1_off + 8])[0] & 0x00fffffffffffe00
for i in range(64):
    e, b = struct.unpack('>QQ', d[l2 + 16 * i:l2 + 16 * i + 16])
    if e or b:
        print(i, '%016x %016x' % (e, b))
PY
}

# both CMDS...: run the qemu-io commands on q.qcow2 with qemu-io and on
# m.qcow2 with qimg io, one process per command (as 271), then compare
both() {
    local c
    for c in "$@"; do
        "$QEMU_IO" -c "$c" q.qcow2 >q.out 2>&1
        "$QIMG" io -c "$c" m.qcow2 >m.out 2>&1
        assert_eq "'$c': output" "$(io_filter <q.out)" "$(io_filter <m.out)"
    done
    assert_eq "$*: L2 entries" "$(l2 q.qcow2)" "$(l2 m.qcow2)"
    assert_rc "$*: data" 0 "$QEMU_IMG" compare q.qcow2 m.qcow2
    assert_rc "$*: check" 0 "$QEMU_IMG" check m.qcow2
}
fresh() {
    qi create -q -f qcow2 -o extended_l2=on "$@" q.qcow2 1M
    cp q.qcow2 m.qcow2
}

# COW after a snapshot (271's "copy-on-write on an image with snapshots")
fresh
cmds=()
for c in $(seq 0 9); do
    cmds+=("write -q -z $((64 * c + 14))k 2k" "write -q -P $((0xd0 + c)) $((64 * c + 26))k 2k"
        "write -q -P $((0xe0 + c)) $((64 * c + 36))k 2k")
done
both "${cmds[@]}"
qi snapshot -c snap1 q.qcow2
qi snapshot -c snap1 m.qcow2
both "write -q -P 0xf0 30k 1k" "write -q -P 0xf1 84k 1k" "write -q -P 0xf2 168k 1k" \
    "write -q -P 0xf3 218k 1k" "write -q -P 0xf4 270k 1k" "write -q -P 0xf5 321k 1k" \
    "write -q -z 414k 3k" "write -q -z 474k 2k" "write -q -z 538k 1k" "write -q -z 588k 1k"

# COW of a compressed cluster, and over a backing file
for backing in no yes; do
    if [ $backing = yes ]; then
        qi create -q -f qcow2 b.qcow2 1M
        qio b.qcow2 "write -P 0x11 0 1M"
        fresh -b b.qcow2 -F qcow2
    else
        fresh
    fi
    both "write -q -c -P 1 0 64k" "write -q -c -P 2 64k 64k" "write -q -c -P 3 128k 64k" \
        "write -q -c -P 4 192k 64k" "write -q -c -P 5 256k 64k" "write -q -P 9 20k 2k" \
        "write -q -P 9 100k 1k" "write -q -P 6 330k 2k" "write -q -P 7 400k 2k"
    # zero writes starting or ending inside compressed clusters (271's
    # "Writing zeroes" with compressed clusters), aligned and not
    both "write -q -z 32k 64k" "write -q -z 159k 65k" "write -q -z 256k 66k" \
        "write -q -z 448k 20k"
done
finish
