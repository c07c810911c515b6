#!/bin/bash
# QEMU's fatal / non-fatal split for corrupt metadata (meta.c invariant 3),
# where QEMU's iotest 060 shows it, against qemu-io and qemu-img 7.2 on
# copies of the same image:
#  - a discard of a cluster whose host offset is not cluster aligned drops
#    the entry and leaks the cluster, a non-fatal event ("Image is corrupt:
#    Cannot free unaligned cluster ..."), and the discard succeeds, the
#    corrupt bit stays clear (zero.c invariant 7); a fatal event after it
#    is still reported ("Marking image as corrupt"); with an external data
#    file, where nothing is freed, no event;
#  - amend -o compat=0.10 failing on a corruption says "Failed to turn
#    zero into data clusters: Input/output error" (QEMU's words; the
#    corruption has its own line).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3

# make WRITE-LEN OFFSET=VALUE...: q.qcow2 and m.qcow2, 64M, WRITE-LEN
# written at 0, then the 8-byte values poked
make() {
    local len=$1 kv
    shift
    for t in q m; do
        mk_qcow2 $t.qcow2 64M "" "write 0 $len"
        for kv in "$@"; do
            set_u64 $t.qcow2 "${kv%=*}" "${kv#*=}"
        done
    done
}

# both DESC ARGS...: qemu-io ARGS q.qcow2 and qimg io ARGS m.qcow2
both() {
    local desc=$1
    shift
    "$QEMU_IO" "$@" q.qcow2 >q.out 2>q.err
    QRC=$?
    "$QIMG" io "$@" m.qcow2 >m.out 2>m.err
    assert_eq "$desc: exit code" "$QRC" "$?"
    assert_eq "$desc: stdout" "$(io_filter <q.out)" "$(io_filter <m.out)"
    assert_eq "$desc: stderr" "$(io_filter <q.err)" "$(io_filter <m.err)"
}

# 060's "non-fatal corruption on freeing": L2 entry 0 at 0x52a00
make 64k 0x40000=0x8000000000052a00
both "discard of an unaligned cluster" -c 'discard 0 64k'
assert_eq "discard of an unaligned cluster: non-fatal" \
    "qcow2: Image is corrupt: Cannot free unaligned cluster 0x52a00; further non-fatal corruption events will be suppressed" \
    "$(cat m.err)"
assert_eq "discard of an unaligned cluster: corrupt bit" "$(corrupt_bit q.qcow2)" \
    "$(corrupt_bit m.qcow2)"
"$QEMU_IMG" check m.qcow2 >m.chk 2>&1
assert_eq "discard of an unaligned cluster: the cluster leaks" 3 "$?"
"$QEMU_IMG" check q.qcow2 >q.chk 2>&1
assert_eq "discard of an unaligned cluster: check" "$(cat q.chk)" "$(cat m.chk)"

# With an external data file nothing is freed, so QEMU says nothing: the
# entry goes, silently
for t in q m; do
    rm -f $t.raw
    mk_qcow2 $t.qcow2 64M data_file=$t.raw 'write 0 64k'
    set_u64 $t.qcow2 0x40000 0x8000000000002a00
done
both "unaligned cluster in a data file" -c 'discard 0 64k'
assert_eq "unaligned cluster in a data file: corrupt bit" "$(corrupt_bit q.qcow2)" \
    "$(corrupt_bit m.qcow2)"

# 060's "non-fatal and then fatal corruption report"
make 128k 0x40000=0x8000000000052a00 0x40008=0x8000000000062a00
both "non-fatal, then fatal" -c 'discard 0 64k' -c 'read 64k 64k'
assert_eq "non-fatal, then fatal: corrupt bit" "$(corrupt_bit q.qcow2)" \
    "$(corrupt_bit m.qcow2)"

# A read-only open stays non-fatal, once (060's read-only report)
make 64k 0x40000=0x8000000000052a00
both "read-only" -r -c 'read 0 64k' -c 'read 0 64k'

# amend's error after a corruption (060's unaligned L1 entry and
# preallocated zero cluster)
for c in "unaligned L1 entry|0x30000=0x8000000000042a00" \
    "unaligned preallocated zero cluster|0x40000=0x8000000000052a01"; do
    IFS='|' read -r desc kv <<<"$c"
    make 64k "$kv"
    "$QEMU_IMG" amend -o compat=0.10 q.qcow2 >q.out 2>q.err
    QRC=$?
    "$QIMG" amend -o compat=0.10 m.qcow2 >m.out 2>m.err
    assert_eq "$desc: exit code" "$QRC" "$?"
    assert_eq "$desc: stderr" "$(io_filter <q.err)" "$(io_filter <m.err)"
done
finish
