#!/bin/bash
# qimg measure against qemu-img measure on the same inputs (stdout, stderr
# after the program name, exit code):
#  - --size N over the target matrix: raw and qcow2, v2/v3, cluster sizes
#    512..2M, refcount widths 1..64, extended L2, preallocation, a backing
#    file, and sizes from 0 to the L1 limit ("too large");
#  - sources: a sparse raw file, qcow2 with data, zero clusters and a
#    backing chain, preallocated metadata, persistent bitmaps ("bitmaps
#    size"), v2 (no bitmaps line), an internal snapshot (-l, both forms);
#    human and JSON output;
#  - every refusal: bad options, both or neither of --size and a file, -f
#    without a file, unknown formats, a missing snapshot, a raw -l.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

# 1. --size over the target matrix (measure.c invariants 1, 2, 4).
for o in "" "-O raw" "-O qcow2" "-O qcow2 -o compat=0.10" "-O qcow2 -o cluster_size=512" \
    "-O qcow2 -o cluster_size=2M" "-O qcow2 -o cluster_size=16k,extended_l2=on" \
    "-O qcow2 -o refcount_bits=1" "-O qcow2 -o refcount_bits=64,cluster_size=4k" \
    "-O qcow2 -o preallocation=metadata" "-O qcow2 -o preallocation=full" \
    "-O qcow2 -o backing_file=b.qcow2" "-O qcow2 -o size=5G"; do
    for sz in 0 1 1000 1G 100G 3T; do
        # shellcheck disable=SC2086
        same_as_qemu_err measure $o --size $sz
    done
done
same_as_qemu_err measure -O qcow2 --size 1G --output=json
same_as_qemu_err measure -O qcow2 -o cluster_size=512 --size 3T
same_as_qemu_err measure -O qcow2 --size 7E

# 2. Sources.
truncate -s 100M s.raw
dd if=/dev/urandom of=s.raw bs=1k seek=3 count=70 conv=notrunc 2>/dev/null
dd if=/dev/urandom of=s.raw bs=1M seek=50 count=3 conv=notrunc 2>/dev/null
"$QEMU_IMG" create -q -f qcow2 b.qcow2 100M
"$QEMU_IO" -c 'write -P 1 0 1M' -c 'write -z 2M 1M' -c 'write -P 2 10M 100k' \
    b.qcow2 >/dev/null
"$QEMU_IMG" create -q -f qcow2 -b b.qcow2 -F qcow2 t.qcow2 120M
"$QEMU_IO" -c 'write -P 3 5M 64k' -c 'write -z 0 512k' -c 'write -P 3 110M 1k' \
    t.qcow2 >/dev/null
"$QEMU_IMG" create -q -f qcow2 -o preallocation=metadata p.qcow2 50M
"$QEMU_IO" -c 'write -P 4 1M 1M' p.qcow2 >/dev/null
"$QEMU_IMG" create -q -f qcow2 bm.qcow2 1G
"$QEMU_IMG" bitmap --add bm.qcow2 b1
"$QEMU_IMG" bitmap --add -g 512k bm.qcow2 a_longer_bitmap_name
"$QEMU_IO" -c 'write -P 5 0 3M' bm.qcow2 >/dev/null # (marks them in use)
"$QEMU_IMG" create -q -f qcow2 -o compat=0.10 v2.qcow2 10M
"$QEMU_IO" -c 'write -P 6 1M 1M' v2.qcow2 >/dev/null
"$QEMU_IMG" create -q -f qcow2 -o cluster_size=4k sn.qcow2 10M
"$QEMU_IO" -c 'write -P 6 0 1M' sn.qcow2 >/dev/null
"$QEMU_IMG" snapshot -c s1 sn.qcow2
"$QEMU_IO" -c 'write -P 7 4M 2M' sn.qcow2 >/dev/null
for src in "-f raw s.raw" s.raw b.qcow2 t.qcow2 p.qcow2 bm.qcow2 "-U bm.qcow2" v2.qcow2 \
    sn.qcow2 "-l s1 sn.qcow2" "-l snapshot.name=s1 sn.qcow2" "-l snapshot.id=1 sn.qcow2"; do
    for o in "" "-O qcow2" "-O qcow2 -o cluster_size=4k" "-O qcow2 -o cluster_size=1M,compat=0.10" \
        "-O qcow2 -o backing_file=x" "-O qcow2 -o preallocation=falloc" \
        "-O qcow2 -o extended_l2=on" "-O qcow2 --output=json"; do
        # shellcheck disable=SC2086
        same_as_qemu_err measure $o $src
    done
done
# measure's promise: a copy fits in "required"
rm -f copy.qcow2
"$QIMG" convert -O qcow2 t.qcow2 copy.qcow2
req=$("$QIMG" measure -O qcow2 t.qcow2 | sed -n 's/^required size: //p')
assert_rc "the copy fits in 'required' ($(stat -c %s copy.qcow2) <= $req)" 0 \
    test "$(stat -c %s copy.qcow2)" -le "$req"

# 3. Refusals.
for args in "" "--size 1G s.raw" "-f raw" "-l s1" "s.raw b.qcow2" "--size -5" \
    "--size 1Q" "--size 9E" "-O foo --size 1G" "--output=xml --size 1G" \
    "-O qcow2 -o foo=1 --size 1G" "-O qcow2 -o cluster_size=3 --size 1G" \
    "-O qcow2 -o cluster_size=abc --size 1G" "-O qcow2 -o compat=0.9 --size 1G" \
    "-O qcow2 -o compat=0.10,refcount_bits=8 --size 1G" "-O qcow2 -o refcount_bits=3 --size 1G" \
    "-O qcow2 -o extended_l2=on,cluster_size=4k --size 1G" \
    "-O qcow2 -o extended_l2=maybe --size 1G" "-O qcow2 -o preallocation=bogus --size 1G" \
    "-O raw -o foo=1 --size 1G" "-l nosuch sn.qcow2" "-l nosuch s.raw" "nosuch.qcow2" \
    "-O qcow2 -o help --size 1G"; do
    # shellcheck disable=SC2086
    same_as_qemu_err measure $args
done
# a format qemu-img has but cannot measure: refused as well (qimg's message
# calls it unknown: it has raw and qcow2)
same_as_qemu measure -O vmdk --size 1G

finish
