#!/bin/bash
# qimg bitmap places what it writes as qemu-img 7.2 does (issue 29, QEMU
# 190; qcow2/bitmap-ops.c invariant 5): after each operation of one
# sequence, run by both on copies of one image, the layout is the same --
# the file's length (tables and the directory written with their own
# length, the file ending inside its last cluster), the directory's and
# every table's offset, every table's entries (the data clusters: each
# bitmap re-stored in directory order, its data before its table), and
# the refcount of every cluster.  Then QEMU 190's own check: measure of
# the image read as raw (which sees the file's length) after two --add
# on a 2 TiB image with 2 MiB clusters.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3

layout() {
    python3 "$IOTESTS_DIR/tests/020-qcow2edit.py" "$1" layout
}

"$QEMU_IMG" create -q -f qcow2 q.qcow2 64M
"$QEMU_IMG" bitmap --add -g 512 q.qcow2 a
"$QEMU_IMG" bitmap --add q.qcow2 b
"$QEMU_IO" -c 'write 0 1M' -c 'write 40M 64k' q.qcow2 >/dev/null
"$QEMU_IMG" bitmap --add q.qcow2 c
cp q.qcow2 m.qcow2
step=0
while read -r args; do
    step=$((step + 1))
    # shellcheck disable=SC2086
    set -- $args
    name=${*: -1}
    opts=("${@:1:$#-1}")
    if [ "${opts[0]}" = write ]; then
        "$QEMU_IO" -c "write -P 3 $name 64k" q.qcow2 >/dev/null
        "$QEMU_IO" -c "write -P 3 $name 64k" m.qcow2 >/dev/null
    else
        "$QEMU_IMG" bitmap "${opts[@]}" q.qcow2 "$name"
        "$QIMG" bitmap "${opts[@]}" m.qcow2 "$name"
    fi
    assert_eq "$step: $args: layout" "$(layout q.qcow2)" "$(layout m.qcow2)"
    assert_rc "$step: $args: check" 0 "$QEMU_IMG" check -q m.qcow2
done <<'OPS'
--disable b
--add x
--add -g 1M y
write 8M
--clear a
--remove b
--enable x
--remove c
--remove a
--remove x
--remove y
--add z
OPS

# QEMU 190
"$QEMU_IMG" create -q -f qcow2 -o cluster_size=2M q.qcow2 2T
cp q.qcow2 m.qcow2
for t in "$QEMU_IMG" "$QIMG"; do
    f=q.qcow2
    [ "$t" = "$QIMG" ] && f=m.qcow2
    "$t" bitmap --add --granularity 512 -f qcow2 "$f" b1
    "$t" bitmap --add -g 2M -f qcow2 "$f" b2
done
assert_eq "2 TiB: layout" "$(layout q.qcow2 | head -n 4)" "$(layout m.qcow2 | head -n 4)"
assert_eq "2 TiB: measure as raw" \
    "$("$QEMU_IMG" measure -O qcow2 -f raw q.qcow2 | grep fully)" \
    "$("$QEMU_IMG" measure -O qcow2 -f raw m.qcow2 | grep fully)"
finish
