#!/bin/bash
# After an image is marked corrupt while open, QEMU's driver is gone from
# the node: QEMU iotest 060's steps against qemu-io and qemu-img 7.2 on
# copies of the same image (exit code, stdout, stderr, corrupt bit):
#  - a request that comes after the mark fails with "No medium found"
#    (meta.c invariant 2), reads too (the fast read path included), also
#    the partial tail of a discard whose whole clusters marked the image
#    (zero.c invariant 2: QEMU's block layer sends it as a request of its
#    own), with writeback (the free that waits for a flush meets the
#    broken refcount block at once: alloc.c invariant 2) and writethrough
#    caching;
#  - a repair (check -r all) that meets a broken refcount block on the
#    writable image marks it corrupt ("Marking image as corrupt"), rebuilds
#    the refcount structure, drops the fixes it makes after the mark and
#    fails the double check with "No medium found"; the next repair fixes
#    the leak it left (check.c invariant 8; 060's "Discarding with an
#    unaligned refblock"), and the same for the repair a dirty image gets
#    when opened (060's "Testing dirty corrupt image").
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3

# same DESC: q.out/q.err/QRC (qemu's) against m.out/m.err/$2 (qimg's)
same() {
    assert_eq "$1: exit code" "$QRC" "$2"
    assert_eq "$1: stdout" "$(io_filter <q.out)" "$(io_filter <m.out)"
    assert_eq "$1: stderr" "$(io_filter <q.err | sed 's/q\.qcow2/X/g')" \
        "$(io_filter <m.err | sed 's/m\.qcow2/X/g')"
    assert_eq "$1: corrupt bit" "$(corrupt_bit q.qcow2)" "$(corrupt_bit m.qcow2)"
}

# io DESC ARGS...: qemu-io ARGS q.qcow2 and qimg io ARGS m.qcow2
io() {
    local desc=$1
    shift
    "$QEMU_IO" "$@" q.qcow2 >q.out 2>q.err
    QRC=$?
    "$QIMG" io "$@" m.qcow2 >m.out 2>m.err
    same "$desc" $?
}

# img DESC ARGS...: qemu-img ARGS q.qcow2 and qimg ARGS m.qcow2
img() {
    local desc=$1
    shift
    "$QEMU_IMG" "$@" q.qcow2 >q.out 2>q.err
    QRC=$?
    "$QIMG" "$@" m.qcow2 >m.out 2>m.err
    same "$desc" $?
}

# make WRITE-LEN OFFSET=VALUE...: q.qcow2 and m.qcow2, 64M (reftable at
# 0x10000), WRITE-LEN written at 0 (if any), then the values poked
make() {
    local len=$1 kv t
    shift
    for t in q m; do
        rm -f $t.qcow2
        mk_qcow2 $t.qcow2 64M "" ${len:+"write 0 $len"}
        for kv in "$@"; do
            set_u64 $t.qcow2 "${kv%=*}" "${kv#*=}"
        done
    done
}

# 1. Requests after the mark: an unaligned refcount block met by the free
# of a discard's whole cluster; its 1-byte tail, then later requests.
for cache in writeback writethrough; do
    make 128k 0x10000=0x2a00
    io "discard + tail, $cache" --cache $cache -c 'discard 0 65537' -c 'write 0 512' \
        -c 'write -z 0 64k' -c 'discard 0 64k' -c 'write -c 0 64k' -c 'flush'
    # 060 goes on with the repairs of that image
    img "060: first repair ($cache)" check -q -r all
    img "060: second repair ($cache)" check -r all
    img "060: check after the repairs ($cache)" check
done

# Reads after the mark fail too (meta.c invariant 2), the lock-free fast
# read path (fastmap.c) included: the discard's refcount block, and 060's
# overlap check (an L2 entry pointing at the refcount table: the rewrite of
# cluster 0 is refused).  Reads of clusters read before the mark, then
# plain, vectored and asynchronous reads.
for cache in writeback writethrough; do
    make 128k 0x10000=0x2a00
    io "reads after the mark, $cache" --cache $cache -c 'read 64k 512' \
        -c 'discard 0 65537' -c 'read 64k 512' -c 'read 0 512' -c 'readv 0 512' \
        -c 'aio_read 64k 512' -c 'aio_flush' -c 'write 64k 512'
    make 64k 0x40000=0x8000000000010000
    io "reads after an overlap, $cache" --cache $cache -c 'read 0 512' \
        -c 'write 0 512' -c 'read 0 512' -c 'read 32k 4k' -c 'readv 0 512'
done

# A whole-cluster discard alone: the head is the whole request, nothing
# after it (no tail) is refused.
make 128k 0x10000=0x2a00
io "discard of a whole cluster" --cache writeback -c 'discard 0 64k'

# 2. The same repair without -q (the summary, then the double check's
# failure), and a check without -r (read-only: not fatal, nothing marked).
make 128k 0x10000=0x2a00
img "check of a broken refcount block" check
img "repair of a broken refcount block" check -r all
img "second repair" check -r all

# 3. A dirty image whose refcount block is unaligned: the repair at open
# fails ("Could not repair dirty image") after rebuilding; check -r all then
# repairs the leak (060's "Testing dirty corrupt image").
make "" 0x10000=0xffff2a00 72=1
io "open of a dirty corrupt image" -c close
img "repair after the failed open" check -r all
img "check after the repair" check

finish
