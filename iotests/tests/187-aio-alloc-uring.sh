#!/bin/bash
# 187-aio-alloc-uring: allocating writes at depth 32 with -t none (the
# io_uring engine plans them on the submitting thread and links them when
# the ring's write completes: api/aio.c invariant 13, qcow2/write.c
# invariant 18), `qimg bench -w` against `qemu-img bench -w` with the same
# pattern, offsets and sizes on two fresh images: qemu-img compare finds
# them identical and qemu-img check finds qimg's clean.  Cluster sizes 4k,
# 64k, 2M; extended L2; a backing file (partial clusters that need its
# bytes take the pool); sizes and steps that leave parts of clusters (COW
# zeros written with the data) and 512-byte aligned ones.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

# one CREATE-OPTS BENCH-ARGS...
one() {
    local copts=$1
    shift
    rm -f q.qcow2 m.qcow2
    # shellcheck disable=SC2086
    "$QEMU_IMG" create -q -f qcow2 $copts q.qcow2 32M || exit 1
    # shellcheck disable=SC2086
    "$QEMU_IMG" create -q -f qcow2 $copts m.qcow2 32M || exit 1
    "$QEMU_IMG" bench -q -w -d 32 -t none --pattern=0x5a "$@" q.qcow2 || exit 1
    assert_rc "qimg bench -w $* ($copts)" 0 "$QIMG" bench -q -w -d 32 -t none \
        --pattern=0x5a "$@" m.qcow2
    assert_rc "compare ($copts, $*)" 0 "$QEMU_IMG" compare -q q.qcow2 m.qcow2
    assert_rc "check ($copts, $*)" 0 "$QEMU_IMG" check -q m.qcow2
}

"$QEMU_IMG" create -q -f raw base.raw 32M || exit 1
"$QEMU_IO" -f raw -c 'write -P 0x33 0 32M' base.raw >/dev/null || exit 1
for copts in "-o cluster_size=4k" "" "-o cluster_size=2M" "-o extended_l2=on" \
    "-b base.raw -F raw" "-b base.raw -F raw -o extended_l2=on,cluster_size=32k"; do
    one "$copts" -c 500 -s 4k -S 64k -o 4096
    one "$copts" -c 300 -s 12k -S 52k -o 8192
    one "$copts" -c 300 -s 3584 -S 7680 -o 512
done
finish
