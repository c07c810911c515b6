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
#    (refcount.c invariant 5), where other steps name the reftable index.
. "$(dirname "$0")/../common.sh"
requires qimg qemu-img qemu-io python3

# set_u64 IMG OFFSET VALUE
set_u64() {
    python3 - "$@" <<'PY'
import struct, sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2], 0))
    f.write(struct.pack(">Q", int(sys.argv[3], 0)))
PY
}

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

corrupt_bit() {
    "$QEMU_IMG" info "$1" | grep 'corrupt:'
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

finish
