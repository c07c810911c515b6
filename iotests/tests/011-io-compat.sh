#!/bin/bash
# qimg io against qemu-io: the same command lists, run on two copies of the
# same image, give the same stdout and stderr (timings filtered the way
# QEMU's iotests filter them) and exit codes, and leave images with the same
# contents (qemu-img compare) and the same allocation map.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3

# QEMU iotests' _filter_qemu_io, plus the program names and prompts.
filter_io() {
    sed -e 's/[0-9]* ops; [0-9/:. sec]* ([0-9/.inf]* [EPTGMKiBbytes]*\/sec and [0-9/.inf]* ops\/sec)/X ops; XX:XX:XX.X (XXX YYY\/sec and XXX ops\/sec)/' \
        -e 's/^[0-9]*,[0-9]*,[0-9]*:[0-9]*:[0-9.]*,[0-9.inf]*,[0-9.inf]*$/CSV/' \
        -e 's/qemu-io: /qimg: /' \
        -e "s/\\.[qm]' and probing/.X' and probing/" \
        -e 's/\(qemu\|qimg\)-io> /PROMPT /g' "$@"
}
# filter_io_files FILE...: each FILE through filter_io, in place
filter_io_files() { filter_io -i "$@"; }

# io_both DESC IMG ARGS...: run qemu-io ARGS on IMG.q and qimg io ARGS on
# IMG.m; compare outputs, exit codes and the images.
io_both() {
    local desc=$1 img=$2 qrc mrc
    shift 2
    "$QEMU_IO" "$@" "$img.q" >q.out 2>q.err </dev/null
    qrc=$?
    "$QIMG" io "$@" "$img.m" >m.out 2>m.err </dev/null
    mrc=$?
    compare_run "$desc" "$img" "$qrc" "$mrc"
}

# io_stdin DESC IMG ARGS... <commands: the same with the commands on stdin.
io_stdin() {
    local desc=$1 img=$2 qrc mrc
    shift 2
    cat >cmds.in
    "$QEMU_IO" "$@" "$img.q" >q.out 2>q.err <cmds.in
    qrc=$?
    "$QIMG" io "$@" "$img.m" >m.out 2>m.err <cmds.in
    mrc=$?
    compare_run "$desc" "$img" "$qrc" "$mrc"
}

# (one sed filters the four outputs in place, one python3 makes both maps:
# a process costs ~8 ms of CPU, a python3 ~40, see common.sh)
compare_run() {
    local desc=$1 img=$2 qrc=$3 mrc=$4 fmt=qcow2
    assert_eq "$desc: exit code" "$qrc" "$mrc"
    filter_io_files q.out m.out q.err m.err
    assert_eq "$desc: stdout" "$(<q.out)" "$(<m.out)"
    assert_eq "$desc: stderr" "$(<q.err)" "$(<m.err)"
    case "$img" in *raw*) fmt=raw ;; esac
    assert_rc "$desc: contents" 0 "$QEMU_IMG" compare -f $fmt -F $fmt "$img.q" "$img.m"
    same_map "$desc: map" "$img.q" "$img.m" $fmt
    if [ $fmt = qcow2 ]; then
        assert_rc "$desc: qemu-img check" 0 "$QEMU_IMG" check "$img.m"
    fi
}

# new_image NAME CREATE-ARGS... SIZE: NAME.q and NAME.m, identical.
new_image() {
    local name=$1 size=${*: -1}
    shift
    rm -f "$name.q" "$name.m"
    "$QEMU_IMG" create -q "${@:1:$#-1}" "$name.q" "$size" || exit 1
    cp "$name.q" "$name.m"
}

# The main list: every command, option and error path that both tools have.
cmds=(
    -c 'write -P 0xab 0 4k' -c 'read -P 0xab 0 4k' -c 'read -P 0xac 0 4k'
    -c 'read -v 0 64' -c 'write -z 4k 4k' -c 'write -z -u 8k 64k'
    -c 'discard 64k 64k' -c 'flush' -c 'read -q 0 1k' -c 'write -q -P 1 0 1'
    -c 'read 0 100M' -c 'read -v 1 17' -c 'read -C 0 1' -c 'length'
    -c 'read 0 1.5k' -c 'foo' -c 'read' -c 'read 0 abc' -c 'read -x 0 1'
    -c 'flush x' -c 'read -P 1 -l 2 0 1' -c 'read -l 2 0 1'
    -c 'read 0 3000000000' -c 'read -b 1 512' -c 'write -z -P 1 0 1'
    -c 'write -u 0 1' -c 'write -n 0 1' -c 'write -c 512 511' -c 'write -c 3 512'
    -c 'read 1E 1' -c 'read 0 -1' -c 'write -P 300 0 1' -c 'write -P abc 0 1'
    -c 'r 0 0' -c 'w -P 5 1000 100000' -c 'read -P 5 1000 100000'
    -c 'read -P 5 -s 10 -l 5 1000 100000' -c 'read -P 0 -s 10 -l 5 990 100'
    -c 'read -P 5 -s 200000 1000 100' -c 'write -b -z 0 512' -c 'write -f -c 0 512'
    -c 'write -z -n 0 3G' -c 'write 0 3G' -c 'discard 0 3G' -c 'discard -x 0 1'
    -c 'write -C -P 7 1M 512' -c 'discard -q 1M 512' -c 'discard -C 2M 64k'
    -c 'read -v 1048570 12' -c 'write 63M 2M' -c 'discard 63M 2M'
    -c 'w -z 10M 30M' -c 'read -P 0 10M 30M' -c 'write -P 0x11 40M 1536'
    -c 'write -z 40M 512' -c 'read -v 40M 1k' -c 'd 40M 64k'
    -c 'read -P 0 40M 64k' -c 'write -P 0x22 65535k 1k' -c 'read -P 0x22 65535k 1k'
    -c 'length'
)

new_image img -f qcow2 64M
io_both "qcow2" img "${cmds[@]}"

new_image v2 -f qcow2 -o compat=0.10 64M
io_both "qcow2 v2" v2 "${cmds[@]}"

new_image small -f qcow2 -o cluster_size=512,refcount_bits=1 64M
io_both "512-byte clusters" small "${cmds[@]}"

new_image ext -f qcow2 -o extended_l2=on,cluster_size=128k 64M
io_both "extended L2" ext "${cmds[@]}"

rm -f base.qcow2
"$QEMU_IMG" create -q -f qcow2 base.qcow2 64M
"$QEMU_IO" -c 'write -P 0x77 0 64M' base.qcow2 >/dev/null
new_image top -f qcow2 -b base.qcow2 -F qcow2 64M
io_both "with a backing file" top "${cmds[@]}"
new_image top2 -f qcow2 -o compat=0.10 -b base.qcow2 -F qcow2 64M
io_both "v2 with a backing file" top2 "${cmds[@]}"

new_image img.raw -f raw 64M
io_both "raw" img.raw -f raw "${cmds[@]}"

# a probed raw image (no -f): the warning, and block 0 may not become a
# qcow2 header (raw.c invariant 4), whole or piece by piece; with -f raw it
# may
printf 'QFI\373\0\0\0\3' >hdr.bin
head -c 504 /dev/zero >>hdr.bin
new_image probed.raw -f raw 1M
io_both "probed raw" probed.raw -c 'write -s hdr.bin 0 512' -c 'write -P 7 0 4k' \
    -c 'write -s hdr.bin 0 4' -c 'write -P 3 7 1' -c 'write -P 0 4 4' \
    -c 'write -s hdr.bin 4096 512' -c 'read -v 0 16'
io_both "probed raw, read-only" probed.raw -r -c 'read -v 0 16'
io_both "raw given" probed.raw -f raw -c 'write -s hdr.bin 0 512' -c 'read -v 0 16'

# cache modes
for t in writeback none unsafe directsync; do
    new_image c$t -f qcow2 64M
    io_both "cache $t" c$t -t $t -c 'write -P 1 0 1M' -c 'write -P 2 512 3k' -c flush \
        -c 'read -P 1 0 512' -c 'read -P 2 512 3k' -c 'read -v 3584 16' -c 'discard 0 64k'
done

# compressed writes (qcow2): whole clusters, the last partial cluster, and
# the refusals
new_image comp -f qcow2 -o cluster_size=4k 1000k
io_both "compressed" comp -c 'write -c -P 3 0 64k' -c 'read -P 3 0 64k' \
    -c 'write -c -P 4 996k 4k' -c 'write -c -P 5 1000k 0' -c 'write -c 1024 4k' \
    -c 'write -c -P 6 64k 5k' -c 'write -c -P 7 128k 12k' -c 'read -P 7 128k 12k' \
    -c 'write -c -z 256k 4k' -c 'read -v 994k 4k' -c 'write -c -P 8 200k 4k' \
    -c 'write -c -P 9 200k 4k' -c 'read -P 8 200k 4k'

# the vmstate area
new_image vm -f qcow2 64M
io_both "vmstate" vm -c 'write -b -P 0x42 0 64k' -c 'read -b -P 0x42 0 64k' \
    -c 'write -b -P 0x43 1M 3584' -c 'flush' -c 'read -b -P 0x43 1M 3584' \
    -c 'read -b -v 1M 32' -c 'read -b -P 0 2M 512' -c 'read -P 0 0 64M'

# read-only
new_image ro -f qcow2 64M
io_both "read-only" ro -r -c 'read 0 1' -c 'write 0 1' -c 'write -z 0 1' \
    -c 'discard 0 1' -c 'flush' -c 'read -P 0 0 64k' -c 'w -P 300 0 1' -c 'flush x'

# commands on stdin, with prompts
new_image stdin -f qcow2 64M
io_stdin "stdin" stdin -t writeback <<'EOF'
write -P 0x33 0 64k
read  0   1

r -P 0x33 0 1
flush x
read -P 1 0 1
quit
read 0 1
EOF
io_stdin "stdin without quit" stdin <<'EOF'
write -z 0 4k
read -P 0 0 4k
EOF

# the asynchronous commands (tools/io-aio.c facts 1-4): one request per
# aio_flush where they print, bursts in quiet mode, then synchronous checks
new_image aio -f qcow2 64M
io_both "aio" aio -c 'aio_write -P 5 0 4k' -c 'aio_flush' -c 'aio_write -P 6 4k 4k 4k' \
    -c 'aio_flush' -c 'aio_read -P 6 4k 4k 4k' -c 'aio_flush' -c 'aio_read -v 0 16' \
    -c 'aio_flush' -c 'aio_read -P 9 0 4k' -c 'aio_flush' -c 'aio_write -C -f -P 7 64k 512' \
    -c 'aio_flush' -c 'aio_write -q -P 1 1M 4k' -c 'aio_write -q -P 2 1088k 4k' \
    -c 'aio_write -q -z -u 2M 64k' -c 'aio_write -q -P 3 3M 512 512' -c 'aio_read -q -P 0 2M 64k' \
    -c 'aio_flush' -c 'read -P 1 1M 4k' -c 'read -P 2 1088k 4k' -c 'read -P 3 3M 1k' \
    -c 'aio_write -z 0 1 2' -c 'aio_write -u 0 1' -c 'aio_read' -c 'aio_write 64M 4k' \
    -c 'aio_flush'
io_both "aio read-only" aio -r -c 'aio_write 0 1'

# quit ends a -c list; top-level option errors
new_image q -f qcow2 64M
io_both "quit" q -c 'write 0 1' -c 'quit' -c 'write 1 1'
"$QEMU_IO" -t foo -c 'read 0 1' q.q >q.out 2>q.err
qrc=$?
"$QIMG" io -t foo -c 'read 0 1' q.m >m.out 2>m.err
assert_eq "bad cache mode: exit code" "$qrc" "$?"
assert_eq "bad cache mode: message" "$(filter_io <q.err)" "$(cat m.err)"
"$QEMU_IO" -c 'read 0 1' nonexistent.qcow2 >q.out 2>q.err
qrc=$?
"$QIMG" io -c 'read 0 1' nonexistent.qcow2 >m.out 2>m.err
assert_eq "missing image: exit code" "$qrc" "$?"
assert_eq "missing image: message" "$(filter_io <q.err)" "$(cat m.err)"

finish
