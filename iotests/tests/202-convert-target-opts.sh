#!/bin/bash
# 202-convert-target-opts: qemu-img convert -n --target-image-opts against
# qemu-img 7.2 (tools/convert.c fact 10).  An explicit -O beside
# --target-image-opts is refused when the target is opened ("--image-opts
# and --format are mutually exclusive", after the sources' errors); qimg
# dropped the -O and converted.  With -n, -c is refused by the format the
# target was opened with (not by -O, which defaults to raw): a qcow2
# target named by options converts compressed, a missing target is "Could
# not open" before any compression error (qimg refused both up front).
# A probed raw image named by options (a -n target, --image-opts, qemu-io's
# open -o alone) gets qemu's probe warning, naming its file.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

qi create -q -f qcow2 src.qcow2 1M
qio src.qcow2 'write -P 7 0 64k'
qi create -q -f raw small.raw 64k

fresh() {
    rm -f t.raw t.qcow2
    qi create -q -f raw t.raw 1M
    qi create -q -f qcow2 t.qcow2 1M
    qio t.raw 'write -P 5 0 64k'
    qio t.qcow2 'write -P 5 0 64k'
}

# -O beside --target-image-opts: refused, the target left as it was
for o in "-O raw" "-O qcow2" "-O raw -c" "-O qcow2 -t none" "-O raw -m 1"; do
    for t in driver=raw,file.filename=t.raw driver=qcow2,file.filename=t.qcow2 \
        file.filename=t.raw driver=raw,file.filename=nosuch.raw; do
        fresh
        # shellcheck disable=SC2086
        same_as_qemu_err convert -n $o src.qcow2 --target-image-opts "$t"
        assert_rc "$o $t: t.raw kept" 0 "$QEMU_IO" -f raw -c 'read -P 5 0 64k' t.raw
        assert_rc "$o $t: t.qcow2 kept" 0 "$QEMU_IO" -c 'read -P 5 0 64k' t.qcow2
    done
done
fresh
same_as_qemu_err convert -n -O raw --image-opts driver=qcow2,file.filename=src.qcow2 \
    --target-image-opts driver=raw,file.filename=t.raw
# the sources are opened first
same_as_qemu_err convert -n -O raw nosuch.qcow2 --target-image-opts \
    driver=raw,file.filename=t.raw
# without -O: the options' driver
for t in driver=raw,file.filename=t.raw driver=qcow2,file.filename=t.qcow2; do
    fresh
    same_as_qemu_err convert -n src.qcow2 --target-image-opts "$t"
    assert_rc "$t: converted" 0 "$QEMU_IMG" compare --image-opts \
        driver=qcow2,file.filename=src.qcow2 "$t"
done

# -n -c: the opened target's format decides, after it is opened
for t in driver=raw,file.filename=t.raw driver=qcow2,file.filename=nosuch.qcow2; do
    fresh
    same_as_qemu_err convert -n -c src.qcow2 --target-image-opts "$t"
done
# (each tool on an empty target: a compressed write does not overwrite)
for tool in "$QEMU_IMG" "$QIMG"; do
    rm -f t.qcow2
    qi create -q -f qcow2 t.qcow2 1M
    assert_rc "${tool##*/} -c into qcow2 by options" 0 "$tool" convert -n -c src.qcow2 \
        --target-image-opts driver=qcow2,file.filename=t.qcow2
    assert_rc "${tool##*/} -c into qcow2 by options: data" 0 "$QEMU_IMG" compare \
        src.qcow2 t.qcow2
    assert_eq "${tool##*/} -c into qcow2 by options: compressed" 1 \
        "$("$QEMU_IMG" check t.qcow2 | grep -c "100.00% compressed clusters")"
done
for a in "-O raw src.qcow2 nosuch.raw" "-O qcow2 src.qcow2 nosuch.qcow2" \
    "-O raw src.qcow2 small.raw" "src.qcow2 t.qcow2"; do
    fresh
    # shellcheck disable=SC2086
    same_as_qemu_err convert -n -c $a
done

# the probed-raw warning for an image named by options names its file
# (tools/output.c): a -n target probed raw (qimg: no warning), an image of
# --image-opts (qimg named the options), qemu-io's open -o without a path
# (qimg: no warning)
qi create -q -f raw r.raw 1M
for a in "-n" "-n -c"; do
    # shellcheck disable=SC2086
    same_as_qemu_err convert $a src.qcow2 --target-image-opts file.filename=r.raw
done
for a in "resize --image-opts file.filename=r.raw 1M" \
    "resize --image-opts driver=file,filename=r.raw 1M" \
    "map --image-opts file.filename=r.raw" "map -f raw r.raw" \
    "amend -o size=1M --image-opts file.filename=r.raw"; do
    # shellcheck disable=SC2086
    same_as_qemu_err $a
done
for o in file.filename=r.raw driver=file,filename=r.raw \
    file.driver=file,file.filename=r.raw driver=raw,file.filename=r.raw; do
    same_as_qemu_io "open -o $o" -c "open -o $o" -c 'read 0 512'
    same_as_qemu_io "open -r -o $o" -c "open -r -o $o" -c 'read 0 512'
    same_as_qemu_io "--image-opts $o" -c 'read 0 512' --image-opts "$o"
done

finish
