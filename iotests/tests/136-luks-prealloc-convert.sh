#!/bin/bash
# convert into a new LUKS-encrypted qcow2 image with preallocation (QEMU
# iotest 188; qcow2/qcow2.c qcow2_has_zero_init): preallocated clusters
# hold zeros on disk, which decrypt to noise, so the target does not read
# as zeros and the convert must write the source's zeros.  The target must
# read as the source does, through qemu-img and qimg.
. "${0%/*}/../common.sh"
requires qimg qemu-img

S="secret,id=sec0,data=astrochicken"
qi create -q -f qcow2 src.qcow2 4M
qi create -q -f qcow2 -o cluster_size=65536 part.qcow2 4M
"$QEMU_IO" -c 'write -P 9 1M 64k' part.qcow2 >/dev/null || exit 1

for src in src.qcow2 part.qcow2; do
    for p in metadata falloc; do
        rm -f t.qcow2
        assert_rc "convert $src, preallocation=$p" 0 "$QIMG" convert -O qcow2 --object "$S" \
            -o "encrypt.format=luks,encrypt.key-secret=sec0,encrypt.iter-time=10,preallocation=$p" \
            "$src" t.qcow2
        for tool in "$QEMU_IMG" "$QIMG"; do
            assert_rc "$src, $p: $(basename "$tool") reads the source's contents" 0 \
                "$tool" compare --object "$S" --image-opts "driver=qcow2,file.filename=$src" \
                "driver=qcow2,encrypt.key-secret=sec0,file.filename=t.qcow2"
        done
    done
done

finish
