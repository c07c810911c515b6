#!/bin/bash
# 196-blkdebug-as-qemu: what qemu-img and qemu-io 7.2 say about a QEMU
# blkdebug node (issue 29), against them:
#  - info: "disk size: unavailable" under a format and over one
#    (block/faulty.c invariant 10);
#  - convert from an image whose read_aio rule fails its data read: only
#    qemu-img's "error while reading at byte 0: ..." line and exit code 1,
#    no qimg detail under it (block/faulty.c invariant 11, api/copy.c);
#  - write_aio rules over the raw format: a data write raises it, a zero
#    write does not, a probed raw image's block-0 write does (raw/raw.c
#    invariant 1);
#  - a blkdebug node over a format answers that format's cluster size,
#    dirty flag and snapshots (api/info.c invariant 3), and snapshot
#    operations reach it (api/snapshot.c invariant 5).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

"$QEMU_IMG" create -q -f raw r.raw 1M
"$QEMU_IO" -f raw -c 'write -P 1 0 64k' r.raw >/dev/null
qi create -q -f qcow2 a.qcow2 1M
qio a.qcow2 'write -P 9 0 64k'

img='"image": {"driver": "file", "filename": "r.raw"}'
dbg() { # dbg EVENT ERRNO: raw over a blkdebug node with one inject-error rule
    echo "json:{\"driver\": \"raw\", \"file\": {\"driver\": \"blkdebug\", $img," \
        "\"inject-error\": [{\"event\": \"$1\", \"errno\": $2}]}}"
}

# info: no disk size for the blkdebug node, whichever side of the format
same_as_qemu_err info "$(dbg read_aio 5)"
same_as_qemu_err info "json:{\"driver\": \"raw\", \"file\": {\"driver\": \"blkdebug\", $img}}"
same_as_qemu_err info 'json:{"driver": "blkdebug", "image": {"driver": "raw",
    "file": {"driver": "file", "filename": "r.raw"}}}'
same_as_qemu_err info -f raw blkdebug::r.raw
same_as_qemu_err info -f qcow2 blkdebug::a.qcow2

# convert: qemu-img's one line, its exit code
for e in 5 28; do
    same_as_qemu_err convert -f raw -O raw "$(dbg read_aio $e)" out.raw
    same_as_qemu_err convert -O qcow2 "$(dbg read_aio $e)" out.qcow2
done

# write_aio over raw: the write fails, a zero write passes, the next write
# and the reads see what QEMU's see ("once" rules: the close's flush is
# not failed, api/image.c invariant 3)
once() { # once EVENT ERRNO
    echo "json:{\"driver\": \"raw\", \"file\": {\"driver\": \"blkdebug\", $img," \
        "\"inject-error\": [{\"event\": \"$1\", \"errno\": $2, \"once\": true}]}}"
}
"$QEMU_IMG" create -q -f raw base.raw 1M
"$QEMU_IO" -f raw -c 'write -P 1 0 64k' base.raw >/dev/null
for e in 5 28; do
    IO_RAW=1 IO_IMAGE=r.raw IO_FROM=base.raw same_as_qemu_io "write_aio errno $e" \
        -c 'write -P 3 0 4k' -c 'write -P 4 4k 4k' -c 'read -P 1 0 4k' \
        -c 'read -P 4 4k 4k' "$(once write_aio $e)"
    IO_RAW=1 IO_IMAGE=r.raw IO_FROM=base.raw same_as_qemu_io "write_aio errno $e, zero write" \
        -c 'write -z 0 4k' -c 'write -P 5 8k 4k' -c 'read -P 0 0 4k' \
        -c 'read -P 1 8k 4k' "$(once write_aio $e)"
done
printf '[inject-error]\nevent = "write_aio"\nerrno = "5"\nonce = "on"\n' >wr.conf
IO_RAW=1 IO_IMAGE=r.raw IO_FROM=base.raw same_as_qemu_io "probed raw, block 0" \
    -c 'write -P 6 0 4k' -c 'write -P 7 0 4k' -c 'read -P 7 0 4k' blkdebug:wr.conf:r.raw

# blkdebug over qcow2: info and snapshots of the qcow2 node below
mk_qcow2 lz.qcow2 1M lazy_refcounts=on,cluster_size=4096
"$QEMU_IMG" snapshot -c s1 lz.qcow2
("$QEMU_IO" -c 'write -P 2 0 4k' -c 'sigraise 9' lz.qcow2) >/dev/null 2>&1 # dirty
over() { # over IMG: blkdebug over qcow2 over IMG
    echo "json:{\"driver\": \"blkdebug\", \"image\": {\"driver\": \"qcow2\"," \
        "\"file\": {\"driver\": \"file\", \"filename\": \"$1\"}}}"
}
for o in human json; do
    same_as_qemu_err info -U --output=$o "$(over lz.qcow2)"
    same_as_qemu_err info --output=$o "$(over a.qcow2)"
    same_as_qemu_err info --output=$o "json:{\"driver\": \"blkdebug\", \"image\": $(
        )\"json:{\\\"driver\\\": \\\"raw\\\", \\\"file\\\": {\\\"driver\\\": $(
        )\\\"file\\\", \\\"filename\\\": \\\"r.raw\\\"}}\"}"
done
same_as_qemu_err snapshot -l -U "$(over lz.qcow2)"
qi check -q -r all lz.qcow2
assert_rc "snapshot -c through blkdebug" 0 "$QIMG" snapshot -c s2 "$(over lz.qcow2)"
assert_rc "snapshot -c: the qcow2 has it" 0 grep -q ' s2 ' <("$QEMU_IMG" snapshot -l lz.qcow2)
# (QEMU 7.2's qemu-img crashes on this one)
assert_rc "snapshot -a through blkdebug" 0 "$QIMG" snapshot -a s1 "$(over lz.qcow2)"
assert_rc "snapshot -a: the data is s1's" 0 "$QEMU_IO" -c 'read -P 0 0 4k' lz.qcow2
assert_rc "snapshot -d through blkdebug" 0 "$QIMG" snapshot -d s1 "$(over lz.qcow2)"
assert_eq "snapshot -d: gone from the qcow2" "$("$QEMU_IMG" snapshot -l lz.qcow2 | grep -c ' s1 ')" 0
assert_rc "check after the snapshot operations" 0 "$QEMU_IMG" check -q lz.qcow2

finish
