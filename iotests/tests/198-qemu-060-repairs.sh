#!/bin/bash
# QEMU iotest 060's corrupt images where qimg now takes QEMU's steps,
# against qemu-io and qemu-img 7.2 on copies of the same image (exit code,
# stdout, stderr, corrupt bit, file size):
#  - check -r all grows the file to hold a refcount block outside it
#    (check.c invariant 2; 060's "Discarding a refblock covered by an
#    unaligned refblock": a block at 64 GiB of a 256 KiB file), up to
#    cluster 2^21: farther, qimg leaves the file alone and rebuilds, where
#    QEMU grows it whatever the distance (qimg's own checks);
#  - an L2 table that starts inside the file and ends past it is read
#    with zeros past the end (cluster.c invariant 1; 060's "L2 reference
#    into L1": the L1 table, the file's last 8 bytes, as the L2 table, whose
#    first entry names that cluster as data: the write is refused by the
#    overlap check, a read-only open reads it);
#  - a write's new clusters go right after the host clusters of the part
#    before them when free there (write.c invariant 20, QEMU's
#    handle_alloc), so layouts match qemu-io's; and there, a refcount
#    structure that calls the header free is refused as QEMU refuses it
#    (060's "empty refcount table with valid L1 and L2 tables":
#    "Preventing invalid allocation of refcount block at offset 0").
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3

# same DESC RC: q.out/q.err/QRC (qemu's) against m.out/m.err/RC (qimg's)
same() {
    assert_eq "$1: exit code" "$QRC" "$2"
    assert_eq "$1: stdout" "$(io_filter <q.out | sed 's/q\.qcow2/X/g')" \
        "$(io_filter <m.out | sed 's/m\.qcow2/X/g')"
    assert_eq "$1: stderr" "$(io_filter <q.err | sed 's/q\.qcow2/X/g')" \
        "$(io_filter <m.err | sed 's/m\.qcow2/X/g')"
    assert_eq "$1: corrupt bit" "$(corrupt_bit q.qcow2)" "$(corrupt_bit m.qcow2)"
    assert_eq "$1: file size" "$(stat -c %s q.qcow2)" "$(stat -c %s m.qcow2)"
}

# io DESC ARGS...: qemu-io ARGS q.qcow2 and qimg io ARGS m.qcow2; when an
# argument holds IMG (an open command), that is the image's name instead
io() {
    local desc=$1 a q=() m=() named=
    shift
    for a in "$@"; do
        [[ "$a" == *IMG* ]] && named=1
        q+=("${a//IMG/q.qcow2}")
        m+=("${a//IMG/m.qcow2}")
    done
    [ -n "$named" ] || { q+=(q.qcow2); m+=(m.qcow2); }
    "$QEMU_IO" "${q[@]}" >q.out 2>q.err
    QRC=$?
    "$QIMG" io "${m[@]}" >m.out 2>m.err
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

# make OPTS WRITE-LEN OFFSET=VALUE...: q.qcow2 and m.qcow2, 64M with -o
# OPTS (reftable at 0x10000, L1 at 0x30000), WRITE-LEN written at 0 (if
# any), then the 8-byte values poked
make() {
    local opts=$1 len=$2 kv t
    shift 2
    for t in q m; do
        rm -f $t.qcow2
        mk_qcow2 $t.qcow2 64M "$opts" ${len:+"write 0 $len"}
        for kv in "$@"; do
            set_u64 $t.qcow2 "${kv%=*}" "${kv#*=}"
        done
    done
}

# 1. Refcount blocks outside the file: -r all grows it to hold them.
# DESC|OPTS|POKES
while IFS='|' read -r desc opts pokes; do
    [ -n "$desc" ] || continue
    # shellcheck disable=SC2086 # several pokes
    make "$opts" "" $pokes
    img "$desc: shrink" resize --shrink 32M
    img "$desc: first repair" check -q -r all
    img "$desc: second repair" check -r all
    img "$desc: check" check
done <<'EOF'
covered by an unaligned block (060)|refcount_bits=1|0x10008=0x1000000000 0x10010=0x200
at 64 GiB|refcount_bits=1|0x10008=0x1000000000
at 1 GiB, 16-bit refcounts||0x10008=0x40000000
EOF

# 1b. Farther than cluster 2^21 (256 GiB at 64 KiB clusters): the file is
# not grown (qemu-img would make it 256 GiB), the rebuild replaces the
# block, and qemu-img finds the result clean.
make refcount_bits=1 "" 0x10008=0x4000000000
assert_rc "far block: repair" 0 "$QIMG" check -q -r all m.qcow2
assert_eq "far block: file not grown" "$(($(stat -c %s m.qcow2) < 1048576))" 1
assert_rc "far block: clean after" 0 "$QEMU_IMG" check -q m.qcow2

# 2. The L1 table as an L2 table (L1 at 0x30000, 8 bytes, the end of the
# file; COPIED, so the write goes in place).
make "" "" 0x30000=0x8000000000030000
img "L2 into L1: check" check
io "L2 into L1: write" -c 'open -o overlap-check=all IMG' -c 'write -P 0x2a 0 512'
img "L2 into L1: info" info
io "L2 into L1: read-write open" -c 'open -o overlap-check=all IMG' -c 'read 0 512'
io "L2 into L1: read-only" -r -c 'read -v 0 512' -c 'read -v 64k 512'
make "" "" 0x30000=0x8000000000030000
io "L2 into L1: reads" -c 'read -v 0 512' -c 'read -P 0 512 63k' -c 'map'

# 3. Where a write's new clusters go: the same layout as qemu-io's.
# DESC|OPTS|COMMANDS
args=()
while IFS='|' read -r desc opts cmds; do
    [ -n "$desc" ] || continue
    make "$opts" ""
    eval "args=($cmds)"
    io "$desc" "${args[@]}"
    img "$desc: map" map --output=json
    img "$desc: check" check
done <<'EOF2'
after an allocated cluster, end of file||-c 'write 0 64k' -c 'write 1M 64k' -c 'write -P 4 1M 192k' -c 'map'
taken after it: a shorter run||-c 'write 0 64k' -c 'write 128k 64k' -c 'write 512k 64k' -c 'write -P 5 0 512k' -c 'map'
a new run then an allocated cluster||-c 'write 256k 64k' -c 'write -P 6 128k 192k' -c 'write -P 7 0 512k' -c 'map'
4k clusters, across L2 tables|cluster_size=4096|-c 'write 0 4k' -c 'write 2M 4k' -c 'write -P 8 0 4M' -c 'map'
after an allocated cluster, a hole before||-c 'write 0 64k' -c 'write 128k 64k' -c 'write 256k 64k' -c 'discard 128k 64k' -c 'flush' -c 'write -P 5 256k 128k' -c 'map'
holes before, the run after it cut short||-c 'write 0 64k' -c 'write 128k 64k' -c 'write 256k 64k' -c 'write 1M 64k' -c 'discard 128k 64k' -c 'flush' -c 'write -P 5 256k 256k' -c 'map'
EOF2

# 4. 060: the reftable's first entry cleared after a write; a write over
# that cluster and a new one.
make "" 64k 0x10000=0
io "empty reftable, then a write after a cluster" -c 'write 0 128k'
img "empty reftable: repair" check -r all
make "" "" 0x10000=0
io "empty reftable, first write" -c 'write 0 64k'
img "empty reftable, first write: repair" check -r all

finish
