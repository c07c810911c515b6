#!/bin/bash
# QEMU's blkdebug node named by options under a format (issue 29 item 2:
# api/json-blkdebug.c invariants 1-3) and the rule groups' keys
# (block/faulty-config.c facts 2-3), against qemu-io 7.2 on copies of the
# same image: "file": {"driver": "blkdebug", ...} with inject-error and
# set-state lists (QEMU's 066: a state switched on one write fails the
# next), image as an object or image.filename, config; open -o
# file.driver=blkdebug; immediately=on (QEMU's 179); every refusal as
# qemu-io words it, request limits (align, max-transfer, opt-discard) and
# the options qimg refuses by name.  Then QEMU's
# write_aio on a write that carries its copy-on-write head and tail (QEMU's
# 046: a breakpoint there stops it; faulty-config.c events table).  And a
# data file under raw over blkdebug (QEMU's 289: the failed write frees no
# cluster of the data file).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

# both DESC NAME ARGS...: qemu-io ARGS NAME on q.qcow2 and qimg io on
# m.qcow2 (copies of base.qcow2; IMG in NAME and ARGS is the copy): the same exit
# code, stdout and stderr, then the same guest data.
both() {
    local desc=$1 name=$2 qrc mrc
    shift 2
    cp base.qcow2 q.qcow2 && cp base.qcow2 m.qcow2 || exit 1
    timeout 20 "$QEMU_IO" "${@//IMG/$PWD/q.qcow2}" "${name//IMG/$PWD/q.qcow2}" >q.out 2>q.err
    qrc=$?
    timeout 20 "$QIMG" io "${@//IMG/$PWD/m.qcow2}" "${name//IMG/$PWD/m.qcow2}" >m.out 2>m.err
    mrc=$?
    assert_eq "$desc: exit code" "$qrc" "$mrc"
    assert_eq "$desc: stdout" "$(io_filter <q.out)" "$(io_filter <m.out)"
    assert_eq "$desc: stderr" "$(io_filter <q.err | sed "s|$PWD/q|$PWD/m|g")" \
        "$(io_filter <m.err)"
    assert_eq "$desc: contents" "$("$QEMU_IMG" compare -q q.qcow2 m.qcow2; echo $?)" 0
}

# three data clusters, the middle one preallocated zero (QEMU's 066), and
# a fourth allocated so that a write there needs no metadata
qi create -q -f qcow2 base.qcow2 1M
qio base.qcow2 'write -P 42 0 256k' 'write -z 64k 64k'

SS="'set-state': [{'event': 'write_aio', 'new_state': 2}]"
IE="'inject-error': [{'event': 'write_aio', 'state': 2, 'once': true}]"
J() { echo "json:{'driver': 'qcow2', 'file': {'driver': 'blkdebug', $1}}"; }

both "lists: the second write fails" "$(J "'image.filename': 'IMG', $SS, $IE")" \
    -c 'write -P 1 192k 4k' -c 'write -P 2 200k 4k' -c 'write -P 3 208k 4k'
both "image object" "$(J "'image': {'driver': 'file', 'filename': 'IMG'}, $SS, $IE")" \
    -c 'write -P 1 192k 4k' -c 'write -P 2 200k 4k'
both "one object, not a list" \
    "$(J "'image.filename': 'IMG', 'inject-error': {'event': 'write_aio', 'once': 'on'}")" \
    -c 'write -P 1 192k 4k' -c 'write -P 2 200k 4k'
printf '[set-state]\nevent = "write_aio"\nnew_state = "2"\n' >ss.conf
both "config with a list" "$(J "'config': '$PWD/ss.conf', 'image.filename': 'IMG', $IE")" \
    -c 'write -P 1 192k 4k' -c 'write -P 2 200k 4k'
printf '[inject-error]\nevent = "write_aio"\nimmediately = "on"\nonce = "yes"\n' >imm.conf
both "immediately=on" "blkdebug:$PWD/imm.conf:IMG" -c 'write -P 1 192k 4k' -c 'write -P 2 200k 4k'
both "open -o file.driver=blkdebug" "IMG" -c 'read -P 42 0 4k' -c 'write -P 5 192k 4k' \
    -c 'close' -c "open -o file.driver=blkdebug IMG" -c 'read -P 5 192k 4k'

# refusals, worded as qemu-io's
for o in "'image': 'nodex'" "'image.filename': 'IMG', 'foo': 1" "'x': 1" \
    "'image.filename': 'IMG', 'inject-error': [{'event': 'write_aio', 'bogus': 1}]" \
    "'image.filename': 'IMG', 'set-state': [{'event': 'write_aio', 'errno': 5}]" \
    "'image.filename': 'IMG', 'inject-error': [{'event': 'write_aio', 'once': 'x'}]" \
    "'image.filename': 'IMG', 'inject-error': [{'event': 'write_aio', 'errno': 'x'}]" \
    "'image.filename': 'IMG', 'inject-error': [{'event': 'nope'}]" \
    "'image.filename': 'IMG', 'inject-error': [{'errno': 5}]"; do
    both "refused: $o" "$(J "$o")" -c 'read 0 4k'
done
printf '[inject-error]\nevent = "write_aio"\nbogus = "1"\n' >bad.conf
both "config key refused" "blkdebug:$PWD/bad.conf:IMG" -c 'read 0 4k'
printf '[inject-error]\nevent = "write_aio"\nimmediately = "x"\n' >bad.conf
both "config boolean refused" "blkdebug:$PWD/bad.conf:IMG" -c 'read 0 4k'

# request limits under the format (block/limits.c): the format's requests
# to its file are padded, cut and fragmented as QEMU's block layer does
both "limits under a format" \
    "$(J "'image.filename': 'IMG', 'align': 4096, 'max-transfer': 8192, 'opt-discard': 65536")" \
    -c 'write -P 3 1000 20000' -c 'read -P 3 1000 20000' -c 'write -z 300k 70k' \
    -c 'discard 128k 64k' -c 'read -P 0 300k 70k'
both "limits refused" "$(J "'image.filename': 'IMG', 'align': 3000")" -c 'read 0 4k'
# what qimg's fault node does not have is refused by name
cp base.qcow2 m.qcow2
"$QIMG" io -c 'read 0 4k' "$(J "'image.filename': '$PWD/m.qcow2', 'take-child-perms': ['write']")" \
    >m.out 2>&1
assert_eq "take-child-perms refused" 1 "$(grep -c "option 'take-child-perms' is not supported by qimg" m.out)"
"$QIMG" io -c 'read 0 4k' "$(J "'image': {'driver': 'raw', 'file.filename': '$PWD/m.qcow2'}")" >m.out 2>&1
assert_eq "image.driver raw refused" 1 "$(grep -c "image.driver 'raw' refused" m.out)"

# write_aio stops a partial write into a cluster of the backing file
# (guest data and COW in one write), and an error there fails it
qi create -q -f qcow2 -o cluster_size=64k back.qcow2 1M
qio back.qcow2 'write -P 7 0 1M'
mv base.qcow2 plain.qcow2
qi create -q -f qcow2 -b "$PWD/back.qcow2" -F qcow2 base.qcow2 1M
both "break write_aio on a COW write" "blkdebug::IMG" -c 'break write_aio A' \
    -c 'aio_write -P 10 0x18000 0x2000' -c 'wait_break A' -c 'resume A' -c 'aio_flush' \
    -c 'read -P 7 0 0x18000' -c 'read -P 10 0x18000 0x2000' -c 'read -P 7 0x1a000 0x6000'
printf '[inject-error]\nevent = "write_aio"\nonce = "on"\n' >wa.conf
both "write_aio error on a COW write" "blkdebug:$PWD/wa.conf:IMG" \
    -c 'write -P 10 0x18000 0x2000' -c 'write -P 11 0x28000 0x2000' -c 'read -P 11 0x28000 0x2000'

# a data file under raw over blkdebug (json-name.c invariant 13)
qi create -q -f qcow2 -o "data_file=$PWD/d.raw" d.qcow2 64k
printf '[inject-error]\nevent = "write_aio"\n' >d.conf
DJ="json:{'driver': 'qcow2', 'file': {'driver': 'file', 'filename': '$PWD/d.qcow2'},
  'data-file': {'driver': 'raw', 'file': {'driver': 'blkdebug', 'config': '$PWD/d.conf',
  'image': {'driver': 'file', 'filename': '$PWD/d.raw'}}}}"
cp d.qcow2 d0.qcow2
"$QEMU_IO" -c 'write 0 512' "$DJ" >q.out 2>&1
"$QEMU_IMG" check d.qcow2 >>q.out 2>&1
cp d0.qcow2 d.qcow2
"$QIMG" io -c 'write 0 512' "$DJ" >m.out 2>&1
"$QEMU_IMG" check d.qcow2 >>m.out 2>&1
assert_eq "data file over blkdebug" "$(io_filter <q.out)" "$(io_filter <m.out)"

finish
