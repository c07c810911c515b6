#!/bin/bash
# 200-raw-window: QEMU's raw options offset and size (raw/raw.c invariant
# 6), a window of the file, against qemu-img and qemu-io 7.2: json: names
# (numbers, strings with suffixes, nulls) and --image-opts, probed raw too;
# info (the image's name as QEMU names it), map, reads and writes in and
# past the window (on copies, the files compared after), convert from and
# into a window, resize; the open's checks in QEMU's order and words
# (offset past the end, offset + size past the end, a size not a multiple
# of 512, a bad number).  qimg refused the options ("does not support").
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

qi create -q -f raw r.raw 1M
qio r.raw 'write -P 0x11 0 64k' 'write -P 0x22 64k 64k' 'write -P 0x33 128k 64k'
qi create -q -f qcow2 s.qcow2 256k
qio s.qcow2 'write -P 0x55 0 64k' 'write -P 0x66 128k 4k'

J() { # J MEMBERS [FILE]: a json: name of raw over FILE (r.raw)
    echo "json:{\"driver\": \"raw\", $1\"file\": {\"driver\": \"file\", \"filename\": \"${2:-r.raw}\"}}"
}

# (offset 1 without a size: qemu-img map asserts; not compared)
for m in '"offset": 65536, ' '"size": 65536, ' '"offset": 65536, "size": 131072, ' \
    '"offset": null, "size": null, ' '"offset": "64k", "size": "0x20000", ' \
    '"size": 0, ' '"offset": 1048576, ' '"size": 512, "offset": 512, ' \
    '"offset": 1048577, ' '"size": 2097152, ' '"offset": 524288, "size": 786432, ' \
    '"size": 1000, ' '"size": 1000, "offset": 2097152, ' '"offset": -1, ' \
    '"size": "abc", ' '"size": 18446744073709551104, "offset": 512, '; do
    same_as_qemu_err info "$(J "$m")"
    same_as_qemu_err info --output=json "$(J "$m")"
    same_as_qemu_err map --output=json "$(J "$m")"
done
same_as_qemu_err info "$(J '"offset": 1, ')"
same_as_qemu_err info 'json:{"offset": 65536, "file": {"driver": "file", "filename": "r.raw"}}'
same_as_qemu_err info 'json:{"size": "64k", "file": {"driver": "file", "filename": "s.qcow2"}}'
for o in offset=64k,size=128k offset=64k size=128k offset=1k offset=1M size=1000 \
    offset=2M offset=,size= size=64k,offset=1M; do
    same_as_qemu_err info --image-opts "driver=raw,$o,file.filename=r.raw"
    same_as_qemu_err map --image-opts "driver=raw,$o,file.filename=r.raw"
done

# writes in and past the window (qemu-io and qimg io on copies of r.raw:
# the same files after), then reads (the same output)
for o in offset=64k,size=128k offset=64k size=128k offset=1k offset=1M offset=512,size=512; do
    cp r.raw w.raw.qemu
    "$QEMU_IO" -c 'write -P 0x44 64k 4k' -c 'write 130560 1024' -c 'write -z 0 4k' \
        -c 'discard 4k 4k' -c 'write -P 0x77 0 512' \
        --image-opts "driver=raw,$o,file.filename=w.raw.qemu" >wq.out 2>&1
    cp w.raw.qemu w.raw.want
    cp r.raw w.raw
    "$QIMG" io -c 'write -P 0x44 64k 4k' -c 'write 130560 1024' -c 'write -z 0 4k' \
        -c 'discard 4k 4k' -c 'write -P 0x77 0 512' \
        --image-opts "driver=raw,$o,file.filename=w.raw" >wm.out 2>&1
    sed -i "s|w.raw.qemu|w.raw|" wq.out
    assert_same_filtered "writes through $o: output" io_filter wq.out wm.out
    _checks=$((_checks + 1))
    cmp -s w.raw.want w.raw || _fail "writes through $o: the files differ"
    cp r.raw w.raw
    same_as_qemu_io "io $o" -c 'read -P 0x22 0 64k' -c 'read -P 0x33 64k 64k' \
        -c 'read 128k 512' -c 'read 127k 2k' -c 'map' \
        --image-opts "driver=raw,$o,file.filename=w.raw"
done

# convert from a window, and into one (-n)
for o in offset=64k,size=256k offset=64k offset=1k,size=512k; do
    rm -f c.q c.m
    "$QEMU_IMG" convert -O qcow2 --image-opts "driver=raw,$o,file.filename=r.raw" c.q
    same_as_qemu_err convert -O qcow2 --image-opts "driver=raw,$o,file.filename=r.raw" c.m
    assert_rc "convert from $o: contents" 0 "$QEMU_IMG" compare c.q c.m
done
for o in offset=512,size=512k offset=64k,size=256k offset=1M offset=64k; do
    cp r.raw t.raw
    "$QEMU_IMG" convert -n s.qcow2 --target-image-opts "driver=raw,$o,file.filename=t.raw" \
        >/dev/null 2>&1
    mv t.raw t.want
    cp r.raw t.raw
    same_as_qemu_err convert -n s.qcow2 --target-image-opts "driver=raw,$o,file.filename=t.raw"
    _checks=$((_checks + 1))
    cmp -s t.want t.raw || _fail "convert into $o: the files differ"
done

# resize: a window with a size is fixed; one without grows past its offset
for c in "offset=64k 2M" "size=64k 2M" "offset=64k,size=64k 64k" "offset=64k --shrink 512k"; do
    set -- $c
    cp r.raw z.raw
    "$QEMU_IMG" resize --image-opts "driver=raw,$1,file.filename=z.raw" "${@:2}" >/dev/null 2>&1
    mv z.raw z.want
    cp r.raw z.raw
    same_as_qemu_err resize --image-opts "driver=raw,$1,file.filename=z.raw" "${@:2}"
    _checks=$((_checks + 1))
    cmp -s z.want z.raw || _fail "resize $c: the files differ"
done

finish
