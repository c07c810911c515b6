#!/bin/bash
# 173-probe-read-fails: a format probe whose read of the file fails, against
# qemu-img and qemu-io 7.2 (api/open.c invariant 9):
#  - an NBD export whose first read fails (iotests/nbd_hostile.py: a reply
#    with a cookie nobody asked for, a simple reply cut short): every
#    command that probes the format refuses the open with QEMU's "Could not
#    read image for determining its format: Input/output error" -- info,
#    convert and compare sources, map, check, measure, dd, qemu-io's open
#    (command line and open command), a json: name or --image-opts with no
#    driver -- never opens the export as raw from the bytes it did not get;
#  - blkdebug's rules on read_aio do not fail the probe's read (QEMU's
#    format driver raises read_aio before its data reads, the probe raises
#    nothing; block/faulty-config.c fact 7): the image probes as what it
#    is, the rule fails the format's first data read and, once=off, every
#    request after it; a set-state rule on read_aio switches at that read;
#    with -f qcow2 the format's own open reads (header, tables) are not hit.
# (An NBD backing file is not among them: a backing name never selects a
# protocol in qimg, DESIGN "Images from strangers".)
. "${0%/*}/../common.sh"
. "$IOTESTS_DIR/nbd_hostile.sh"
requires qimg qemu-img qemu-io python3

srv=
trap '[ -z "$srv" ] || kill "$srv" 2>/dev/null; _cleanup' EXIT
sock=$PWD/s.sock
uri="nbd+unix:///?socket=$sock"

# both MODE TOOL ARGS...: TOOL (img or io) ARGS of QEMU's and of qimg, each
# against a fresh MODE server: the same exit code and output
both() {
    local mode=$1 tool=$2 qrc mrc q m
    shift 2
    if [ "$tool" = img ]; then q=("$QEMU_IMG") m=("$QIMG"); else q=("$QEMU_IO") m=("$QIMG" io); fi
    hostile_serve "$mode"
    timeout 60 "${q[@]}" "$@" >q.out 2>&1
    qrc=$?
    hostile_serve "$mode"
    timeout 60 "${m[@]}" "$@" >m.out 2>&1
    mrc=$?
    hostile_stop
    assert_eq "$mode: $tool $*: exit code" "$qrc" "$mrc"
    assert_eq "$mode: $tool $*: output" "$(io_filter <q.out)" "$(io_filter <m.out)"
}

# 1. NBD: the probe's read fails
js="json:{\"file\": {\"driver\": \"nbd\", \"server\": {\"type\": \"unix\", \"path\": \"$sock\"}}}"
opts="file.driver=nbd,file.server.type=unix,file.server.path=$sock"
for mode in bad-cookie short-read-simple; do
    both $mode img info "$uri"
    both $mode img info --output=json "$uri"
    both $mode img convert -O raw "$uri" out.raw
    both $mode img compare "$uri" "$uri"
    both $mode img map "$uri"
    both $mode img check "$uri"
    both $mode img measure -O qcow2 "$uri"
    both $mode img dd if="$uri" of=out.raw bs=512 count=1
    both $mode img info "$js"
    both $mode img info --image-opts "$opts"
    both $mode io -c 'read 0 512' "$uri"
    both $mode io -r -c 'read 0 512' "$uri"
    both $mode io -c "open -r $uri" -c 'read 0 512'
    both $mode io -c 'read 0 512' "$js"
done
# the control: a server that behaves probes raw
both well img info "$uri"

# 2. blkdebug: rules on read_aio and the probe
qi create -q -f qcow2 i0.qcow2 1M
qio i0.qcow2 'write -P 7 64k 64k'
cp i0.qcow2 i.qcow2
qi create -q -f raw r.raw 1M
printf '[inject-error]\nevent = "read_aio"\nerrno = "5"\nonce = "off"\n' >off.conf
printf '[inject-error]\nevent = "read_aio"\nerrno = "28"\nonce = "on"\n' >on.conf
printf '[set-state]\nevent = "read_aio"\nnew_state = "2"\n\n[inject-error]\nevent = "write_aio"\nstate = "2"\n' >st.conf

# probed NAME: info finds the same format as qemu-img's (the line alone:
# blkdebug's disk size is not this test's), with the same exit code
probed() {
    run_both info "$1"
    assert_eq "info $1: exit code" "$Q_RC" "$M_RC"
    assert_eq "info $1: format" "$(grep '^file format' <<<"$Q_OUT")" \
        "$(grep '^file format' <<<"$M_OUT")"
    assert_eq "info $1: errors" "$Q_ERR" "$M_ERR"
}

for c in off on st; do
    for img in i.qcow2 r.raw; do
        d="blkdebug:$PWD/$c.conf:$PWD/$img"
        probed "$d"
        same_as_qemu_io "$c.conf over $img: reads" -c 'read 64k 4k' -c 'read 0 4k' \
            -c 'read 100k 4k' "$d"
    done
    # each tool on a fresh copy (the same allocations); raw is left out:
    # qimg's raw driver raises no write_aio
    IO_IMAGE=i.qcow2 IO_FROM=i0.qcow2 same_as_qemu_io "$c.conf over i.qcow2: writes" \
        -c 'write 128k 512' -c 'read 64k 512' -c 'write 128k 512' \
        "blkdebug:$PWD/$c.conf:$PWD/i.qcow2"
done
# a json: blkdebug node with no driver over it: probed, the rule not hit
for img in i.qcow2 r.raw; do
    probed "json:{\"file\": {\"driver\": \"blkdebug\", \"inject-error\": [{\"event\": \"read_aio\"}], \"image\": {\"driver\": \"file\", \"filename\": \"$PWD/$img\"}}}"
done
# -f qcow2 over the rule: the format's open reads no data (qimg failed it)
same_as_qemu_io "-f qcow2 over off.conf" -f qcow2 -c 'read 0 4k' \
    "blkdebug:$PWD/off.conf:$PWD/i.qcow2"

finish
