#!/bin/bash
# What a close reports after an injected metadata or data error, as qemu-io
# 7.2 reports it (QEMU's iotest 026; qcow2/meta.c invariant 13, api/image.c
# invariant 3, api/vmstate.c invariant 10, block/faulty-config.c fact 6):
#  - a failed write's image is written back once more at close: with the
#    rule spent (once=on) that works and nothing more is printed; with the
#    rule still armed (once=off) QEMU's two lines, "Failed to flush the L2
#    table cache: ERR" and "Failed to flush the refcount block cache: ERR",
#    and no line of qimg's own;
#  - a vmstate write's error (write -b) is told once, to the write, never
#    again at close;
#  - QEMU's events where qimg does the same step: refblock_alloc and
#    refblock_load at every refcount update's block (whether or not it
#    must be made or read), refblock_alloc_hookup at a new block's reftable
#    entry, l1_grow_write_table and l1_grow_activate_table at the new L1
#    table's write and at the header switch;
#  - the same exit code, stdout and stderr as qemu-io for each rule, and
#    qemu-img check finds no error in either tool's result (leaks aside).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

conf() { # EVENT ERRNO ONCE
    printf '[inject-error]\nevent = "%s"\nerrno = "%s"\nonce = "%s"\n' "$1" "$2" "$3" >bd.conf
}

# checked DESC IMG: qemu-img check finds no error (exit 0, or 3: leaks only)
checked() {
    local rc
    "$QEMU_IMG" check "$2" >c.out 2>&1
    rc=$?
    _checks=$((_checks + 1))
    if [ "$rc" != 0 ] && [ "$rc" != 3 ]; then
        _fail "$1: qemu-img check exit $rc"
        head -n 20 c.out
    fi
}

# case DESC BASE CMD: qemu-io and qimg io run CMD on copies of BASE through
# blkdebug with bd.conf
case_both() {
    local desc=$1 base=$2 qrc mrc
    shift 2
    cp "$base" q.qcow2 && cp "$base" m.qcow2 || exit 1
    timeout 60 "$QEMU_IO" "$@" "blkdebug:$PWD/bd.conf:$PWD/q.qcow2" >q.out 2>q.err
    qrc=$?
    timeout 60 "$QIMG" io "$@" "blkdebug:$PWD/bd.conf:$PWD/m.qcow2" >m.out 2>m.err
    mrc=$?
    assert_eq "$desc: exit code" "$qrc" "$mrc"
    assert_eq "$desc: stdout" "$(io_filter <q.out)" "$(io_filter <m.out)"
    assert_eq "$desc: stderr" "$(io_filter <q.err)" "$(io_filter <m.err)"
    checked "$desc: qemu-io's image" q.qcow2
    checked "$desc: qimg's image" m.qcow2
}

# QEMU's 026 setup: 1 KiB clusters, a 128 KiB write; l2_update needs an L2
# table that exists already
"$QEMU_IMG" create -q -f qcow2 -o cluster_size=1k base.qcow2 1G
cp base.qcow2 one.qcow2
"$QEMU_IO" -c 'write 0 512' one.qcow2 >/dev/null
for ev in l1_update l2_update l2_alloc_write write_aio refblock_load \
    refblock_update_part refblock_alloc cluster_alloc; do
    b=base.qcow2
    [ "$ev" = l2_update ] && b=one.qcow2
    for once in on off; do
        conf "$ev" 5 "$once"
        case_both "$ev once=$once" "$b" -c 'write 0 128k'
        case_both "$ev once=$once, vmstate" "$b" -c 'write -b 0 128k'
    done
done
conf l2_update 28 off
case_both "l2_update ENOSPC" one.qcow2 -c 'write 0 128k'

# a new refcount block's reftable entry (QEMU's refblock_alloc_hookup) and
# the refcount table's growth, with 512-byte clusters
"$QEMU_IMG" create -q -f qcow2 -o cluster_size=512 small.qcow2 1G
for once in on off; do
    conf refblock_alloc_hookup 28 "$once"
    case_both "refblock_alloc_hookup once=$once" small.qcow2 -c 'write 0 1M'
    conf refblock_alloc_write_table 28 "$once"
    case_both "refblock_alloc_write_table once=$once" small.qcow2 -c 'write 0 16M'
done

# L1 growth: the new table written, then the header switched to it
for ev in l1_grow_write_table l1_grow_activate_table; do
    for once in on off; do
        conf "$ev" 5 "$once"
        case_both "$ev once=$once" base.qcow2 -c 'write -b 0 64k'
    done
done

finish
