#!/bin/bash
# QEMU's json:{...} pseudo-filenames and --image-opts (api/json-name.c)
# against qemu-img on the same names: info, check, map, compare,
# snapshot -l, measure, convert (--image-opts, --target-image-opts with
# -n), resize, bitmap; nested and dotted keys, "backing": null, qcow2's
# cache-size, and the refusals in qemu-img's words (an unknown key, an
# unknown driver, a node reference, bad JSON, a missing file,
# --image-opts with -f, --target-image-opts without -n).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io


"$QEMU_IMG" create -q -f qcow2 b.qcow2 4M
"$QEMU_IO" -c 'write -P 1 0 1M' b.qcow2 >/dev/null
"$QEMU_IMG" create -q -f qcow2 -b b.qcow2 -F qcow2 j.qcow2 4M
"$QEMU_IO" -c 'write -P 2 2M 64k' j.qcow2 >/dev/null
"$QEMU_IMG" snapshot -c s1 j.qcow2

J='json:{"driver":"qcow2","file":{"driver":"file","filename":"j.qcow2"}}'
for name in "$J" \
    'json:{"file.filename":"j.qcow2","driver":"qcow2","cache-size":"1048576"}' \
    'json:{"driver":"qcow2","file":{"filename":"j.qcow2"}}' \
    'json:{"driver":"qcow2","file":{"driver":"file","filename":"j.qcow2"},"backing":null}' \
    'json:{"driver":"qcow2","file":{"driver":"file","filename":"j.qcow2"},"foo":1}' \
    'json:{"driver":"qcow3","file":{"driver":"file","filename":"j.qcow2"}}' \
    'json:{"driver":"qcow2","file":"j.qcow2"}' \
    'json:{"driver":"qcow2","file":{"driver":"file","filename":"nosuch"}}' \
    'json:{"driver":"qcow2","file":{"driver":"file","filename":"j.qcow2"},"read-only":"maybe"}'; do
    same_as_qemu_err info "$name"
done
same_as_qemu_err info --output=json "$J"
same_as_qemu_err check "$J"
same_as_qemu_err map --output=json "$J"
same_as_qemu_err compare "$J" j.qcow2
same_as_qemu_err snapshot -l "$J"
same_as_qemu_err measure -O qcow2 "$J"
rm -f o.qcow2
"$QEMU_IMG" convert -O qcow2 "$J" o.qcow2
rm -f m.qcow2
"$QIMG" convert -O qcow2 "$J" m.qcow2
assert_rc "convert from a json: name: contents" 0 "$QEMU_IMG" compare -q o.qcow2 m.qcow2
# bad JSON: both refuse (the parsers word the detail each their way)
"$QIMG" info 'json:{"driver":"qcow2"' >m.out 2>&1
assert_eq "bad JSON: exit code" 1 "$?"
prefix="qimg: Could not open 'json:{\"driver\":\"qcow2\"': Could not parse the JSON options: JSON parse error, "
assert_eq "bad JSON: the message" "$prefix" "$(head -c ${#prefix} m.out)"

O=driver=qcow2,file.filename=j.qcow2
same_as_qemu_err info --image-opts "$O"
same_as_qemu_err info --image-opts --backing-chain "$O"
same_as_qemu_err check --image-opts "$O"
same_as_qemu_err map --image-opts "$O"
same_as_qemu_err compare --image-opts "$O" driver=qcow2,file.filename=b.qcow2
same_as_qemu_err snapshot -l --image-opts "$O"
same_as_qemu_err measure -O qcow2 --image-opts "$O"
same_as_qemu_err info --image-opts -f qcow2 "$O"
same_as_qemu_err info --image-opts driver=qcow2,file.filename=j.qcow2,bogus=1
same_as_qemu_err convert --image-opts --target-image-opts "$O" driver=qcow2,file.filename=x.qcow2
for t in q m; do
    rm -f $t.qcow2
    "$QEMU_IMG" create -q -f qcow2 $t.qcow2 4M
done
"$QEMU_IMG" convert -n --image-opts --target-image-opts "$O" driver=qcow2,file.filename=q.qcow2
"$QIMG" convert -n --image-opts --target-image-opts "$O" driver=qcow2,file.filename=m.qcow2
assert_rc "convert --target-image-opts -n: contents" 0 "$QEMU_IMG" compare -q q.qcow2 m.qcow2
for t in q m; do
    cp j.qcow2 $t-r.qcow2
done
"$QEMU_IMG" resize -q --image-opts driver=qcow2,file.filename=q-r.qcow2 8M
"$QIMG" resize -q --image-opts driver=qcow2,file.filename=m-r.qcow2 8M
assert_eq "resize --image-opts: size" "$("$QEMU_IMG" info q-r.qcow2 | grep virtual)" \
    "$("$QEMU_IMG" info m-r.qcow2 | grep virtual)"
"$QEMU_IMG" bitmap --add --image-opts driver=qcow2,file.filename=q-r.qcow2 bm
"$QIMG" bitmap --add --image-opts driver=qcow2,file.filename=m-r.qcow2 bm
assert_eq "bitmap --image-opts" "$("$QEMU_IMG" info q-r.qcow2 | grep -A4 bitmaps)" \
    "$("$QEMU_IMG" info m-r.qcow2 | grep -A4 bitmaps)"
finish
