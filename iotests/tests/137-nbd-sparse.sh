#!/bin/bash
# qimg nbd serving sparse images, beside qemu-nbd on copies of the same
# images (qcow2/fastmap.c invariant 9, read.c invariant 7, qimg-plugin.c
# invariant 4).  4 KiB clusters, so that an L2 table covers 2 MiB and runs of
# data, zero clusters (plain and allocated) and unallocated clusters cross
# L2 tables; one image over a backing file with data, one without:
#  - block status (nbdinfo --map, qemu-img map over NBD): qemu-nbd's;
#  - nbdcopy reads the export twice (the second time in requests the
#    fast path serves, from the clusters learnt, holes included): both
#    times the image's contents;
#  - after writes, writes of zeros and discards through the export over
#    learnt holes and data, nbdcopy reads what the image then holds, and
#    the image is the one qemu-nbd leaves.
. "${0%/*}/../common.sh"
requires qimg qimg-nbd-plugin nbdkit nbdinfo nbdcopy qemu-img qemu-io qemu-nbd

"$QEMU_IMG" create -q -f qcow2 -o cluster_size=4096 base.qcow2 8M
"$QEMU_IO" -c 'write -P 0x11 1M 4M' base.qcow2 >/dev/null
layout=(-c 'write -P 0x21 1536k 1M' -c 'write -z 3584k 1M' -c 'write -P 0x22 6140k 8k'
    -c 'write -P 0x23 7M 64k' -c 'write -z 7M 32k')
"$QEMU_IMG" create -q -f qcow2 -o cluster_size=4096 -b base.qcow2 -F qcow2 top.qcow2 8M
"$QEMU_IMG" create -q -f qcow2 -o cluster_size=4096 solo.qcow2 8M
"$QEMU_IO" "${layout[@]}" top.qcow2 >/dev/null
"$QEMU_IO" "${layout[@]}" solo.qcow2 >/dev/null
changes=(-c 'write -P 0x31 900k 8k' -c 'write -P 0x32 2044k 8k' -c 'write -z 1600k 4k'
    -c 'discard 1700k 4k' -c 'write -P 0x33 3600k 4k' -c 'write -z 6140k 4k')

srv=
trap '[ -n "$srv" ] && kill "$srv" 2>/dev/null; _cleanup' EXIT
serve() { # TOOL IMAGE: a writable server on TOOL.sock, up to 2 clients
    rm -f "$1.sock"
    if [ "$1" = qimg ]; then
        "$QIMG" nbd -t -e 2 -k "$PWD/$1.sock" "$2" 2>>"$1.err" &
    else
        qemu-nbd -t -e 2 -f qcow2 -k "$PWD/$1.sock" "$2" 2>>"$1.err" &
    fi
    srv=$!
    nbd_ready "$1.sock" $srv || finish
}
stop() {
    stop_server "$srv" "$tool"
    srv=
}
uri() { echo "nbd+unix:///?socket=$PWD/$1.sock"; }
# merge adjacent extents of the same type (servers may split differently)
nmap() {
    nbdinfo --map "$1" | awk '{ if (n && $3 == t && $1 == s + l) { l += $2 } else {
        if (n) print s, l, t; s = $1; l = $2; t = $3; n = 1 } } END { if (n) print s, l, t }'
}

for img in top solo; do
    for tool in qemu-nbd qimg; do
        cp "$img.qcow2" "$tool-$img.qcow2"
        "$QEMU_IMG" convert -O raw "$img.qcow2" ref.raw
        serve $tool "$tool-$img.qcow2"
        nmap "$(uri $tool)" >"$tool.$img.map"
        "$QEMU_IMG" map -f raw --output=json "$(uri $tool)" >"$tool.$img.json"
        # 256 KiB requests (64 clusters: the slow path, which learns), then
        # 64 KiB ones (16 clusters: from what was learnt, fastmap.c inv. 6)
        for rs in 262144 65536; do
            rm -f out.raw
            assert_rc "$img, $tool: nbdcopy reads the export ($rs)" 0 \
                timeout 60 nbdcopy --request-size=$rs "$(uri $tool)" out.raw
            assert_rc "$img, $tool: what nbdcopy read is the image ($rs)" 0 \
                cmp out.raw ref.raw
        done
        assert_rc "$img, $tool: writes over holes and data" 0 \
            "$QEMU_IO" -f raw "${changes[@]}" "$(uri $tool)"
        rm -f out.raw
        assert_rc "$img, $tool: nbdcopy reads the export after the writes" 0 \
            timeout 60 nbdcopy --request-size=65536 "$(uri $tool)" out.raw
        stop
        "$QEMU_IMG" convert -O raw "$tool-$img.qcow2" after.raw
        assert_rc "$img, $tool: what nbdcopy read is the image after the writes" 0 \
            cmp out.raw after.raw
        assert_rc "$img, $tool: check clean" 0 "$QEMU_IMG" check "$tool-$img.qcow2"
    done
    assert_eq "$img: extents (nbdinfo --map) as qemu-nbd's" \
        "$(cat "qemu-nbd.$img.map")" "$(cat "qimg.$img.map")"
    assert_eq "$img: qemu-img map over NBD as over qemu-nbd" \
        "$(cat "qemu-nbd.$img.json")" "$(cat "qimg.$img.json")"
    assert_rc "$img: the image qimg nbd leaves is qemu-nbd's" 0 \
        "$QEMU_IMG" compare "qemu-nbd-$img.qcow2" "qimg-$img.qcow2"
done
# the images are what the test says: data (type 0) and holes reading as
# zeros (3) in both, a data run across the table at 2 MiB in top.qcow2
_checks=$((_checks + 1))
if ! { grep -q ' 0$' qimg.solo.map && grep -q ' 3$' qimg.solo.map &&
    grep -q ' 3$' qimg.top.map && grep -q '^1048576 2621440 0$' qimg.top.map; }; then
    _fail "layout: $(cat qimg.top.map qimg.solo.map)"
fi
finish
