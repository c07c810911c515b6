#!/bin/bash
# 199-json-null-options: a JSON null for an option in a json: name whose
# format is probed (no "driver"), against qemu-img and qemu-io 7.2: the
# null is no value but still an option to check against the format found
# (json-opts.c invariants 3 and 4): "lazy-refcounts": null over a raw file
# is QEMU's "Block format 'raw' does not support the option
# 'lazy-refcounts'", an unknown key is refused for a qcow2 image, and an
# option of the probed format is none.  (qimg dropped such nulls.)
# "encrypt.key-secret": null (luks' "key-secret": null) is no key, but
# QEMU keeps it in the image's name as null (qimg named the file alone),
# and an encrypted qcow2 image refuses it at any open, qemu-img info's too
# ("Internal error: parameter key-secret invalid"; qimg opened for info,
# and qemu-io said the key-secret was missing).  A probed luks image takes
# its key-secret option (qimg refused it: "does not support the option").
# Opened read-write, qemu-io's warning for a probed raw image names the
# file, not the json: name (tools/output.c).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

qi create -q -f qcow2 a.qcow2 1M
qio a.qcow2 'write -P 9 0 4k'
qi create -q -f raw r.raw 1M
qio r.raw 'write -P 9 4k 4k'

for img in a.qcow2 r.raw; do
    f="\"file\": {\"driver\": \"file\", \"filename\": \"$img\"}"
    for o in '"lazy-refcounts": null' '"bogus": null' '"l2-cache-size": null' \
        '"overlap-check": null' '"cache-clean-interval": null' \
        '"node-name": null' \
        '"cache": {"direct": null}' '"discard": null' \
        '"l2-cache-entry-size": null'; do
        same_as_qemu_err info "json:{$f, $o}"
        # (read-only: qemu-io warns of a probed raw image before its options
        # are checked, qimg io after the open)
        same_as_qemu_io "qemu-io $img $o" -r -c 'read -P 9 4k 4k' "json:{$f, $o}"
    done
done

# a null key-secret
sec=(--object secret,id=sec0,data=abc)
# iter-time=10: with the default (2 s) each open that unlocks a key costs
# 2.3 s of CPU, a create 4.5 s; the nulls are parsed the same for any count
qi create -q -f qcow2 "${sec[@]}" \
    -o encrypt.format=luks,encrypt.key-secret=sec0,encrypt.iter-time=10 e.qcow2 1M
qi create -q -f qcow2 "${sec[@]}" -o encrypt.format=aes,encrypt.key-secret=sec0 \
    aes.qcow2 1M
qi create -q -f luks "${sec[@]}" -o key-secret=sec0,iter-time=10 l.luks 1M
for img in a.qcow2 e.qcow2 aes.qcow2 l.luks; do
    f="\"file\": {\"driver\": \"file\", \"filename\": \"$img\"}"
    js=("{\"driver\": \"qcow2\", $f, \"encrypt.key-secret\": null}"
        "{$f, \"encrypt.key-secret\": null}"
        "{\"driver\": \"qcow2\", $f, \"encrypt\": {\"key-secret\": null}}")
    [ "$img" != l.luks ] ||
        js=("{\"driver\": \"luks\", $f, \"key-secret\": null}" "{$f, \"key-secret\": null}")
    for j in "${js[@]}"; do
        same_as_qemu_err info "json:$j"
        same_as_qemu_err info --output=json "json:$j"
        same_as_qemu_io "qemu-io $j" -r -c 'read 0 4k' "json:$j"
    done
done
j='{"file": {"driver": "file", "filename": "l.luks"}, "key-secret": "sec0"}'
same_as_qemu_err info "${sec[@]}" "json:$j"
same_as_qemu_io "qemu-io probed luks" "${sec[@]}" -r -c 'read 0 4k' "json:$j"

# read-write: the probed-raw warning names the file
for img in a.qcow2 r.raw; do
    f="\"file\": {\"driver\": \"file\", \"filename\": \"$img\"}"
    for o in '"node-name": null' '"discard": null' '"cache": {"direct": null}'; do
        same_as_qemu_io "qemu-io rw $img $o" -c 'read -P 9 4k 4k' "json:{$f, $o}"
    done
    same_as_qemu_io "qemu-io rw $img" -c 'read -P 9 4k 4k' "json:{$f}"
done

finish
