#!/bin/bash
# QEMU iotest 060's cases where qimg makes QEMU's check at QEMU's step and
# now says what QEMU says there, against qemu-io and qemu-img 7.2 on copies
# of the same image (corrupt bit, exit code, stdout and stderr):
#  - a write into a cluster it keeps (COPIED) whose host offset is not
#    cluster aligned: QEMU's write-path words, "Data / Preallocated zero
#    cluster offset .. unaligned (guest offset: ..)" (write.c invariant 5),
#    where the read path's "Cluster allocation offset" stays for reads and
#    for entries a write replaces;
#  - a shrink (resize --shrink) that drops unused refcount blocks and
#    finds an unaligned one: QEMU's refcount block cache refuses it,
#    "Cannot get entry from refcount block cache: Offset .. is unaligned"
#    (refcount.c invariant 5), where other steps name the reftable index;
#  - blkdebug's cow_read event (write.c invariant 19): a breakpoint there
#    (060's "overlap while COW is in flight": the image is marked corrupt
#    while the write is stopped, and the write then fails with ENOMEDIUM),
#    inject-error rules armed by it, and how many times a write raises it
#    (set-state rules count them).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3

# make OPTS WRITE-LEN OFFSET=VALUE...: q.qcow2 and m.qcow2, 64M with -o
# OPTS, WRITE-LEN written at 0, then the 8-byte values poked
make() {
    local opts=$1 len=$2 kv
    shift 2
    for t in q m; do
        rm -f $t.qcow2
        mk_qcow2 $t.qcow2 64M "$opts" "write 0 $len"
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
    assert_eq "$desc: corrupt bit" "$(corrupt_bit q.qcow2)" "$(corrupt_bit m.qcow2)"
}

# 1. Writes into a kept cluster with an unaligned host offset (060's
# "Writing to an unaligned preallocated zero cluster"; L2 table at 0x40000,
# its entry 1 at 0x40008).  DESC|OPTS|WRITE-LEN|POKES|COMMANDS
while IFS='|' read -r desc opts len pokes cmds; do
    [ -n "$desc" ] || continue
    # shellcheck disable=SC2086 # several pokes
    make "$opts" "$len" $pokes
    eval "args=($cmds)"
    both "$desc" "${args[@]}"
done <<'EOF'
preallocated zero cluster (060)||64k|0x40000=0x8000000000002a01|-c 'write 0 64k'
data cluster, partial write||64k|0x40000=0x8000000000052a00|-c 'write 512 4k'
preallocated zero cluster, partial write||64k|0x40000=0x8000000000052a01|-c 'write 4096 4k'
second cluster of a write||128k|0x40008=0x8000000000062a00|-c 'write -P 7 512 128k'
asynchronous write||64k|0x40000=0x8000000000052a00|-c 'aio_write 512 4k' -c 'aio_flush'
extended L2 entry|extended_l2=on|64k|0x40000=0x8000000000052a00|-c 'write 512 4k'
not kept: a read||64k|0x40000=0x8000000000052a00|-c 'read 512 4k'
not kept: COW read of a partial write||64k|0x40000=0x0000000000052a00|-c 'write 512 4k'
EOF

# 2. A shrink meets an unaligned refcount block (060's "Discarding a
# refblock covered by an unaligned refblock"; reftable at 0x10000).
# DESC|OPTS|WRITE|POKES
while IFS='|' read -r desc opts w pokes; do
    [ -n "$desc" ] || continue
    for t in q m; do
        rm -f $t.qcow2
        mk_qcow2 $t.qcow2 64M "$opts" ${w:+"$w"}
        for kv in $pokes; do
            set_u64 $t.qcow2 "${kv%=*}" "${kv#*=}"
        done
    done
    "$QEMU_IMG" resize --shrink q.qcow2 32M >q.out 2>q.err
    QRC=$?
    "$QIMG" resize --shrink m.qcow2 32M >m.out 2>m.err
    assert_eq "$desc: exit code" "$QRC" "$?"
    assert_eq "$desc: stdout" "$(io_filter <q.out)" "$(io_filter <m.out)"
    assert_eq "$desc: stderr" "$(io_filter <q.err)" "$(io_filter <m.err)"
    assert_eq "$desc: corrupt bit" "$(corrupt_bit q.qcow2)" "$(corrupt_bit m.qcow2)"
    assert_eq "$desc: size" "$("$QEMU_IMG" info q.qcow2 | grep 'virtual size')" \
        "$("$QEMU_IMG" info m.qcow2 | grep 'virtual size')"
done <<'EOF2'
after a block past the end (060)|refcount_bits=1||0x10008=0x1000000000 0x10010=0x200
unaligned past the end|||0x10008=0x1000000200
unaligned, with data|refcount_bits=1|write 0 1M|0x10008=0x30200
EOF2

# 3. blkdebug's cow_read.  060's case: a COW write from the backing file
# stopped before its read; a write meanwhile allocates the cluster of an
# L2 table marked free (refcount block at 0x20000) and marks the image
# corrupt; the resumed write fails.
for t in q m; do
    rm -f $t.qcow2 $t.base
    mk_qcow2 $t.base 1G "" "write 0 64k"
    mk_qcow2 $t.qcow2 1G "backing_file=$t.base,backing_fmt=qcow2" "write 0 64k" \
        "write 512M 64k"
    set_u64 $t.qcow2 0x40000 0
    python3 - $t.qcow2 <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(0x2000a)
    f.write(b"\0\0\0\0")
PY
done
script() {
    printf '%s\n' "open -o file.driver=blkdebug $1" "break cow_read 0" "aio_write 0k 1k" \
        "wait_break 0" "write 64k 64k" "resume 0"
}
script q.qcow2 | "$QEMU_IO" >q.out 2>q.err
QRC=$?
script m.qcow2 | "$QIMG" io >m.out 2>m.err
assert_eq "break at cow_read (060): exit code" "$QRC" "$?"
noprompt() { io_filter | sed -e 's/^\(\(qemu-io\|qimg-io\)> \)*//' -e '/^$/d'; }
assert_eq "break at cow_read (060): stdout" "$(noprompt <q.out)" "$(noprompt <m.out)"
assert_eq "break at cow_read (060): stderr" "$(io_filter <q.err)" "$(io_filter <m.err)"
assert_eq "break at cow_read (060): corrupt bit" "$(corrupt_bit q.qcow2)" \
    "$(corrupt_bit m.qcow2)"

# Counted by set-state rules (QEMU reads both COW parts in one request, one
# cow_read, when at most 16 KiB lie between them): a second cow_read
# fails the data write.  And an inject-error rule it arms.
cat >count.conf <<'EOF2'
[set-state]
event = "cow_read"
state = "1"
new_state = "2"

[set-state]
event = "cow_read"
state = "2"
new_state = "3"

[inject-error]
event = "write_aio"
state = "3"
EOF2
cat >arm.conf <<'EOF2'
[inject-error]
event = "cow_read"
once = "on"
EOF2
rm -f base.qcow2
mk_qcow2 base.qcow2 64M "" "write -P 1 0 1M"
while IFS='|' read -r desc conf cmds; do
    [ -n "$desc" ] || continue
    for t in q m; do
        rm -f $t.qcow2
        mk_qcow2 $t.qcow2 64M "backing_file=base.qcow2,backing_fmt=qcow2"
    done
    eval "args=($cmds)"
    "$QEMU_IO" "${args[@]}" "blkdebug:$conf:q.qcow2" >q.out 2>q.err
    QRC=$?
    "$QIMG" io "${args[@]}" "blkdebug:$conf:m.qcow2" >m.out 2>m.err
    assert_eq "$desc: exit code" "$QRC" "$?"
    assert_eq "$desc: stdout" "$(io_filter <q.out)" "$(io_filter <m.out)"
    assert_eq "$desc: stderr" "$(io_filter <q.err)" "$(io_filter <m.err)"
done <<'EOF2'
head and tail 4 KiB apart: one cow_read|count.conf|-c 'write 512 4k'
16 KiB apart: one|count.conf|-c 'write 512 16k'
16.5 KiB apart: two|count.conf|-c 'write 512 16896'
32 KiB apart: two|count.conf|-c 'write 512 32k'
a head alone: one|count.conf|-c 'write 512 65024'
a whole cluster: none|count.conf|-c 'write 0 64k'
an armed inject-error rule|arm.conf|-c 'write 512 4k' -c 'read -P 1 0 512'
EOF2

finish
