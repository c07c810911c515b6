#!/bin/bash
# qcow2's cache options as qemu-io 7.2 takes them (issue 29, QEMU 103
# 137), each against qemu-io on the same input:
#  - cache-clean-interval is a number (qemu_strtou64: "-1" wraps, any
#    base), at most UINT_MAX seconds ("Cache clean interval too big"),
#    taken by open -o and reopen -o, and the image works on with it;
#  - QEMU's limits on the cache sizes: more than INT_MAX L2 entries (of
#    l2-cache-entry-size) is "L2 cache size too big", more than INT_MAX
#    refcount blocks "Refcount cache size too big", checked in QEMU's
#    order with the other cache-size conflicts.
# The timer itself (cache.c invariant 6, clean.c) is unit-tested
# (tests/test-qcow2-cache.c): it is not visible from qemu-io.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

"$QEMU_IMG" create -q -f qcow2 t.qcow2 64M
for v in 5 0 10 0x10 4294967295 4294967296 -1 abc 1k '' 18446744073709551616; do
    same_as_qemu_io "reopen cache-clean-interval=$v" \
        -c "reopen -o cache-clean-interval=$v" -c 'write -P 55 0 1M' \
        -c 'read -P 55 0 1M' t.qcow2
    same_as_qemu_io "open cache-clean-interval=$v" \
        -c "open -o cache-clean-interval=$v t.qcow2" -c 'read -P 55 0 1M'
done
same_as_qemu_io "image-opts cache-clean-interval" --image-opts \
    -c 'read -P 55 0 1M' "driver=qcow2,file.filename=t.qcow2,cache-clean-interval=1"

# QEMU 137's invalid values, one qemu-io run
same_as_qemu_io "cache sizes" \
    -c "reopen -o cache-size=1M,l2-cache-size=64k,refcount-cache-size=64k" \
    -c "reopen -o cache-size=1M,l2-cache-size=2M" \
    -c "reopen -o cache-size=1M,refcount-cache-size=2M" \
    -c "reopen -o l2-cache-entry-size=33k" \
    -c "reopen -o l2-cache-entry-size=128k" \
    -c "reopen -o refcount-cache-size=256T" \
    -c "reopen -o refcount-cache-size=128T" \
    -c "reopen -o cache-size=300T,l2-cache-size=1M" \
    -c "reopen -o cache-clean-interval=-1" \
    -c 'read -P 55 0 1M' t.qcow2
# L2 entries counted in QEMU's slices (l2-cache-entry-size).  (Sizes
# under the limits that QEMU allocates at once and the host refuses,
# "Could not allocate metadata caches", qimg allocates table by table.)
"$QEMU_IMG" create -q -f qcow2 -o cluster_size=256k big.qcow2 32P
same_as_qemu_io "L2 cache size too big" \
    -c "reopen -o l2-cache-entry-size=512,l2-cache-size=1T" \
    -c "reopen -o l2-cache-entry-size=512,l2-cache-size=1T,refcount-cache-size=600T" \
    -c "reopen -o cache-size=1P,l2-cache-size=1T,l2-cache-entry-size=1k" \
    -c "reopen -o refcount-cache-size=600T" big.qcow2
finish
