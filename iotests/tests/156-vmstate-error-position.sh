#!/bin/bash
# The vmstate writer's error when several of its buffers fail (api/vmstate.c
# invariants 4 and 9, api/error.c invariant 1; QEMU iotest 026's write -b):
# the error reported is the one at the lowest position, and the buffers
# allocate host space in position order, so the failing position and errno
# are the same in every run and the same as QEMU's sequential writer.
#  - blkdebug errors at the refcount table growth of a 16 MiB write -b with
#    512-byte clusters (one allocation in the middle of the state fails,
#    the buffers after it are refused): qimg io's write -b prints
#    qemu-io's "write failed" line and qemu-io's stderr -- the error told
#    once, to the write, not again at close (api/vmstate.c invariant 10) --
#    and qimg vmstate save of the same state reports the MiB where qemu-io's
#    data stops (the first MiB of its image that does not hold the
#    pattern), run after run.
#  - every data write failing (write_aio, once=off): position 0 and
#    qemu-io's errno, run after run.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

conf() { # EVENT ERRNO ONCE
    printf '[inject-error]\nevent = "%s"\nerrno = "%s"\nonce = "%s"\n' "$1" "$2" "$3" >bd.conf
}

# first_bad: the first MiB of t.qcow2's state that is not all 0x5a
first_bad() {
    local m
    for m in $(seq 0 15); do
        if "$QEMU_IO" -c "read -b -P 0x5a $((m << 20)) 1M" t.qcow2 2>&1 |
            grep -q "Pattern verification failed"; then
            echo $((m << 20))
            return
        fi
    done
    echo none
}

# check DESC CLUSTER SIZE: qemu-io once, qimg twice on fresh images (the
# size leaves more than max_in_flight buffers after the failing one, so
# qimg's write call meets the error, as qemu-io's does)
check() {
    local desc=$1 cl=$2 size=$3 qline want i out
    qi create -q -f qcow2 -o cluster_size="$cl" t.qcow2 1G
    qline=$("$QEMU_IO" -c "write -b -P 0x5a 0 $size" "blkdebug:$PWD/bd.conf:$PWD/t.qcow2" \
        2>q.err | grep '^write failed')
    want=$(first_bad)
    for i in 1 2; do
        qi create -q -f qcow2 -o cluster_size="$cl" t.qcow2 1G
        out=$(timeout 60 "$QIMG" io -c "write -b -P 0x5a 0 $size" \
            "blkdebug:$PWD/bd.conf:$PWD/t.qcow2" 2>m.err)
        assert_eq "$desc (run $i): errno as qemu-io's" "$qline" \
            "$(grep '^write failed' <<<"$out")"
        assert_eq "$desc (run $i): stderr as qemu-io's" "$(io_filter <q.err)" \
            "$(io_filter <m.err)"
        qi create -q -f qcow2 -o cluster_size="$cl" t.qcow2 1G
        out=$(head -c "$size" /dev/zero | tr '\0' '\132' |
            timeout 60 "$QIMG" vmstate save "blkdebug:$PWD/bd.conf:$PWD/t.qcow2" s 2>&1)
        assert_eq "$desc (run $i): position where qemu-io's data stops" \
            "Could not write VM state at position $want" \
            "$(grep -o 'Could not write VM state at position [0-9]*' <<<"$out")"
    done
}

conf refblock_alloc_write_table 28 on
check "refcount table growth, ENOSPC once" 512 16M
conf refblock_alloc_write_table 28 off
check "refcount table growth, ENOSPC always" 512 16M
conf refblock_alloc_switch_table 5 on
check "refcount table switch, EIO once" 512 16M
conf write_aio 5 off
check "every data write fails" 65536 16M

finish
