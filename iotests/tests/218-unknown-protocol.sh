#!/bin/bash
# 218-unknown-protocol: a name with a ':' before its first '/' names a
# protocol, as in QEMU 7.2 (block/protocol.c invariant 8): qemu-img and
# qemu-io refuse "a:b.qcow2" with "Unknown protocol 'a'" in info, create
# (before the "Formatting" line, -f file too), convert's target and
# source, create -b (an image named with a folder too); -f file, json: and --image-opts with driver=file open
# the file.  Protocols QEMU has and qimg not (http, iscsi, ...) are named
# as such.  And the preallocation messages of the file protocol and of
# vmdk ("invalid parameter value: foo", "Unsupported preallocation mode:
# metadata"), which are qapi_enum_parse's and file-posix's words.
# Each error must match qemu-img's byte for byte, exit codes and stdout
# too, and no file may be left behind.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

"$QEMU_IMG" create -q -f raw src.raw 1M || exit 1
"$QEMU_IO" -c 'write -P 7 0 64k' src.raw >/dev/null || exit 1

none_left() {
    _checks=$((_checks + 1))
    local left
    left=$(ls -- *:* 2>/dev/null)
    if [ -n "$left" ]; then
        _fail "$1: left behind: $left"
        rm -f -- *:*
    fi
}

for fmt in qcow2 raw vmdk vpc file; do
    same_as_qemu_err create -f $fmt a:b.img 1M
    none_left "create -f $fmt"
done
same_as_qemu_err create -f qcow2 -o cluster_size=bogus a:b.img 1M
same_as_qemu_err create -f qcow2 -b a:f.raw -F raw z.qcow2
same_as_qemu_err create -u -f qcow2 -b a:f.raw -F raw z.qcow2
rm -f z.qcow2
# an image named with a folder: the backing name is not joined to it
mkdir -p d
same_as_qemu_err create -f qcow2 -b a:f.raw -F raw d/z.qcow2
same_as_qemu_err create -f qcow2 -b a:f.raw -F raw "$PWD/d/z.qcow2"
assert_eq "create -b a:f.raw d/z.qcow2: no image left" "" "$(ls d)"
none_left "create -b"
same_as_qemu_err info blkdebug::a:b.qcow2
for name in a:b.qcow2 'abc def:x' ':x' "$(printf 'p%.0s' {1..140}):x"; do
    same_as_qemu_err info "$name"
    same_as_qemu_err convert -O raw src.raw "$name"
    same_as_qemu_err convert -n -O raw src.raw "$name"
    same_as_qemu_err convert -O raw "$name" out.raw
done
none_left "convert"
IO_IMAGE=a:b.raw same_as_qemu_io "qemu-io on a:b.raw" -c 'read 0 512' a:b.raw

# -f file, json: and --image-opts with driver=file read the name as a file
"$QEMU_IMG" create -q -f raw ./a:f.raw 1M || exit 1
same_as_qemu info -f file a:f.raw
same_as_qemu info 'json:{"driver": "file", "filename": "a:f.raw"}'
same_as_qemu info --image-opts driver=file,filename=a:f.raw
same_as_qemu info file:a:f.raw
IO_IMAGE=a:f.raw same_as_qemu_io "qemu-io -f file" -f file -c 'read 0 512' a:f.raw
rm -f ./a:f.raw

# QEMU's protocols qimg has not: named
for name in http://127.0.0.1:1/x https://127.0.0.1:1/x iscsi://127.0.0.1/t/0 \
    fat:/nonexistent nfs://127.0.0.1/x; do
    run_both info "$name"
    assert_eq "info $name: exit code" "$Q_RC" "$M_RC"
    proto=${name%%:*}
    assert_eq "info $name: message" \
        "qimg: Could not open '$name': the '$proto' protocol is not supported by qimg" \
        "$M_ERR"
done

# preallocation messages (file protocol, vmdk)
for fmt in raw file vmdk; do
    same_as_qemu_err create -f $fmt -o preallocation=bogus p.img 1M
    same_as_qemu_err create -f $fmt -o preallocation=metadata p.img 1M
done
rm -f p.img

finish
