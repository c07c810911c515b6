#!/bin/bash
# 203-qcow2-encrypt-opts: qcow2's encrypt.* open options other than the
# key-secret, against qemu-img and qemu-io 7.2 (qcow2 header.c invariant
# 7), in json: names (a JSON null included) and --image-opts, with the
# driver named or probed.  A null encrypt.format (or any null encrypt.*
# key) was qimg's "Block format 'qcow2' does not support the option";
# QEMU takes every encrypt.* key: encrypt.format must name the header's
# method ("No encryption in image header, but options specified format",
# "Header reported 'luks' encryption format but options specify 'aes'"),
# a null one is none; any other key, null or not, is ignored by an
# unencrypted image and refused by an encrypted one ("Parameter 'K' is
# unexpected", after a null key-secret's error, before a missing
# key-secret's).  A raw image still refuses them.
# Each json: name is compared with qemu-img info; with qemu-io too where
# the driver is named, and, with QIMG_LONG=1, where it is probed (the
# same open path after the probe: make test's CPU).  Where the driver is
# probed, make test compares each option with one of the three images in
# turn (every option and every image still probed), QIMG_LONG=1 each with
# every image.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

sec=(--object secret,id=sec0,data=abc)
qi create -q -f qcow2 a.qcow2 1M
qio a.qcow2 'write -P 9 0 4k'
# iter-time=10: with the default (2 s) each open that unlocks the key costs
# 2.3 s of CPU (qemu-io and qimg io alike); the options are parsed the same
# for any iteration count.  qimg makes the LUKS image (qemu-img's create
# costs 2.5 s of CPU for any iter-time: QEMU 7.2 times PBKDF2 until one
# run takes 500 ms, twice), in make test; what is compared is how the
# tools open it, and qemu-io must unlock and read it first.  QIMG_LONG=1:
# qemu-img makes it.
enc_tool=$QIMG
[ -n "${QIMG_LONG:-}" ] && enc_tool=$QEMU_IMG
"$enc_tool" create -q -f qcow2 "${sec[@]}" \
    -o encrypt.format=luks,encrypt.key-secret=sec0,encrypt.iter-time=10 e.qcow2 1M >.c.out 2>&1 ||
    { echo "setup: create e.qcow2 failed:"; cat .c.out; exit 1; }
assert_rc "qemu-io unlocks and reads e.qcow2" 0 "$QEMU_IO" "${sec[@]}" -c 'read -P 0 0 4k' \
    --image-opts driver=qcow2,file.filename=e.qcow2,encrypt.key-secret=sec0
qi create -q -f qcow2 "${sec[@]}" -o encrypt.format=aes,encrypt.key-secret=sec0 \
    aes.qcow2 1M
qi create -q -f raw r.raw 1M

i=0
for img in a.qcow2 e.qcow2 aes.qcow2; do
    f="\"file\": {\"driver\": \"file\", \"filename\": \"$img\"}"
    for d in '"driver": "qcow2", ' ''; do
        n=0
        for o in '"encrypt.format": null' '"encrypt": {"format": null}' \
            '"encrypt.format": "luks"' '"encrypt.format": "aes"' '"encrypt.format": "foo"' \
            '"encrypt.bogus": "x"' '"encrypt.bogus": null' '"encrypt.iter-time": null' \
            '"encrypt.key-secret": "sec0", "encrypt.format": null' \
            '"encrypt.key-secret": "sec0", "encrypt.bogus": null' \
            '"encrypt.key-secret": "sec0", "encrypt.cipher-alg": null' \
            '"encrypt.format": "aes", "encrypt.bogus": "x"' \
            '"encrypt.key-secret": null, "encrypt.bogus": "x"' \
            '"encrypt.key-secret": null, "encrypt.format": "aes"' \
            '"encrypt.key-secret": "nosec", "encrypt.bogus": "x"' \
            '"encrypt": {"format": "luks", "key-secret": "sec0"}' \
            '"encrypt": {"format": "aes", "key-secret": "sec0"}' \
            '"encrypt": {"format": "luks", "key-secret": "sec0", "slot": null}'; do
            n=$((n + 1))
            [ -n "$d" ] || [ -n "${QIMG_LONG:-}" ] || [ $((n % 3)) = $i ] || continue
            same_as_qemu_err info "${sec[@]}" "json:{$d$f, $o}"
            [ -n "$d" ] || [ -n "${QIMG_LONG:-}" ] || continue
            same_as_qemu_io "qemu-io $img $d$o" "${sec[@]}" -r -c 'read -P 0 64k 4k' \
                "json:{$d$f, $o}"
        done
    done
    i=$((i + 1))
done
# the data still reads through an accepted encrypt.format
j='{"driver": "qcow2", "file": {"driver": "file", "filename": "a.qcow2"},
    "encrypt.format": null, "encrypt.bogus": "x"}'
same_as_qemu_io "qemu-io a.qcow2 read" -c 'read -P 9 0 4k' "json:$j"

for img in a.qcow2 e.qcow2 r.raw; do
    for o in encrypt.format=luks encrypt.format=aes encrypt.bogus=1 \
        encrypt.key-secret=sec0,encrypt.format=luks; do
        same_as_qemu_err info "${sec[@]}" --image-opts "file.filename=$img,$o"
        [ "$img" = r.raw ] ||
            same_as_qemu_err info "${sec[@]}" --image-opts "driver=qcow2,file.filename=$img,$o"
        same_as_qemu_io "qemu-io -r $img $o" "${sec[@]}" -r -c 'read 0 4k' --image-opts \
            "file.filename=$img,$o"
    done
done

finish
