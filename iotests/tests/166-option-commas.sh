#!/bin/bash
# ",," in a create/convert -o value is one comma of the value (QEMU's
# option lists; QEMU iotest 082), compared with qemu-img 7.2:
#  - create's "Formatting" line prints the value with its commas doubled
#    once (backing_file=A,,help stays "A,,help", not "A,,,,help"), with
#    -u and with "-o" values "...,,help" and "...,,?" that are not help;
#  - the value itself has the single comma: the backing name qemu-img info
#    reads back, the data file created by create and by convert.
. "${0%/*}/../common.sh"
requires qimg qemu-img

# ---- the Formatting line (082) ----
for v in 'b.qcow2,,help' 'b.qcow2,,?' 'x,,,,y' 'plain'; do
    rm -f t.qcow2
    same_as_qemu_err create -f qcow2 -u -o "backing_file=$v" -F qcow2 t.qcow2 128M
    assert_eq "create -o backing_file=$v: name stored" \
        "$("$QEMU_IMG" info -U t.qcow2 | sed -n 's/^backing file: //p')" \
        "$(printf '%s' "$v" | sed 's/,,/,/g')"
done

# ---- a data file named with a comma, by create and convert ----
rm -f t.qcow2 'e,y'
same_as_qemu_err create -f qcow2 -o 'data_file=e,,y,data_file_raw=on' t.qcow2 1M
assert_eq "create: data file e,y" "yes" "$([ -e 'e,y' ] && echo yes || echo no)"

qi create -q -f qcow2 s.qcow2 1M
rm -f 'd,x' o.qcow2
assert_rc "convert -o data_file=d,,x" 0 "$QIMG" convert -O qcow2 -o 'data_file=d,,x' s.qcow2 o.qcow2
assert_eq "convert: data file as qemu-img reads it" "    data file: d,x" \
    "$("$QEMU_IMG" info o.qcow2 | grep 'data file:')"

finish
