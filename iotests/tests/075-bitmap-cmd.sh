#!/bin/bash
# qimg bitmap against qemu-img bitmap (qcow2/bitmap-ops.c):
#  - the same operation sequences on copies of one image give the same
#    bitmap list (qemu-img info --output=json), qemu-img check clean (no
#    leaks), the same messages and exit codes, refusals included;
#  - QEMU uses what qimg made: a bitmap qimg added records qemu-io's writes
#    (qemu-nbd -B, nbdinfo --map), one qimg cleared reads clean, one qimg
#    removed after QEMU filled it leaves no leaked cluster;
#  - --merge is refused (qimg cannot copy bitmap data yet), as are v2
#    images and raw files;
#  - power loss during --add and --remove (the crash-state explorer): no
#    state is corrupt and the guest data never changes.
. "$(dirname "$0")/../common.sh"
. "$IOTESTS_DIR/crash/lib.sh"
requires qimg qemu-img qemu-io qemu-nbd nbdinfo python3

bitmaps() { "$QEMU_IMG" info --output=json "$1" | python3 -c '
import json, sys
print(json.load(sys.stdin)["format-specific"]["data"].get("bitmaps"))'; }

"$QEMU_IMG" create -q -f qcow2 base.qcow2 64M
"$QEMU_IO" -c 'write -P 1 0 1M' base.qcow2 >/dev/null
cp base.qcow2 q.qcow2
cp base.qcow2 m.qcow2
while read -r args; do
    # shellcheck disable=SC2086
    set -- $args
    name=${*: -1}
    opts=("${@:1:$#-1}")
    "$QEMU_IMG" bitmap "${opts[@]}" q.qcow2 "$name" >q.out 2>q.err
    qrc=$?
    "$QIMG" bitmap "${opts[@]}" m.qcow2 "$name" >m.out 2>m.err
    mrc=$?
    sed -i 's/^qemu-img: /qimg: /' q.err
    assert_eq "bitmap $args: exit code" "$qrc" "$mrc"
    assert_eq "bitmap $args: messages" "$(cat q.out q.err)" "$(cat m.out m.err)"
    assert_eq "bitmap $args: the bitmaps" "$(bitmaps q.qcow2)" "$(bitmaps m.qcow2)"
done <<'OPS'
--add b1
--add -g 512k b2
--add --disable b3
--disable b1
--enable b3
--add --remove tmp
--clear b1
--remove b2
--add b1
--add -g 2G big
--remove nosuch
--enable nosuch
--add -g 100 x
--add -g 4G x
--remove big
OPS
assert_rc "after the sequence: check" 0 "$QEMU_IMG" check -q m.qcow2
same_as_qemu_err info m.qcow2
for args in "" "--add" "-g 64k --remove b1" "-F qcow2 --add b1" "-b base.qcow2 --add b1"; do
    # shellcheck disable=SC2086
    same_as_qemu_err bitmap $args m.qcow2 b1
done
"$QIMG" bitmap --merge b3 m.qcow2 b1 >e.out 2>&1
assert_eq "--merge refused: exit code" 1 "$?"
assert_eq "--merge refused: message" \
    "qimg: --merge is not supported: qimg cannot read or write bitmap data yet" "$(cat e.out)"
assert_eq "--merge refused: nothing changed" "$(bitmaps q.qcow2)" "$(bitmaps m.qcow2)"
"$QEMU_IMG" create -q -f qcow2 -o compat=0.10 v2.qcow2 1M
"$QIMG" bitmap --add v2.qcow2 x >e.out 2>&1
assert_eq "v2: message" \
    "qimg: Operation add on bitmap x failed: Cannot store dirty bitmaps in qcow2 v2 files" \
    "$(cat e.out)"
truncate -s 1M r.raw
assert_rc "raw: refused" 1 "$QIMG" bitmap --add -f raw r.raw x

# QEMU uses what qimg made
emap() { # IMG NAME: the dirty extents QEMU reports
    rm -f n.sock
    qemu-nbd -r -f qcow2 -B "$2" -k "$PWD/n.sock" "$1" &
    local p=$!
    for _ in $(seq 100); do [ -S n.sock ] && break; sleep 0.05; done
    nbdinfo --map="qemu:dirty-bitmap:$2" "nbd+unix:///?socket=$PWD/n.sock" | awk '$3 == 1'
    kill $p
    wait $p 2>/dev/null
}
"$QEMU_IMG" create -q -f qcow2 u.qcow2 64M
"$QIMG" bitmap --add u.qcow2 b1
"$QEMU_IO" -c 'write -P 1 1M 64k' -c 'write -P 2 10M 1M' u.qcow2 >/dev/null
assert_eq "QEMU records writes in a bitmap qimg added" \
    "$(printf '%10s %11s %4s  dirty\n%10s %11s %4s  dirty' 1048576 65536 1 10485760 1048576 1)" \
    "$(emap u.qcow2 b1)"
"$QIMG" bitmap --clear u.qcow2 b1
assert_eq "a bitmap qimg cleared is clean to QEMU" "" "$(emap u.qcow2 b1)"
"$QEMU_IO" -c 'write -P 3 0 3M' u.qcow2 >/dev/null
"$QIMG" bitmap --remove u.qcow2 b1
assert_rc "removing a bitmap QEMU filled: check" 0 "$QEMU_IMG" check -q u.qcow2
assert_eq "removed" "None" "$(bitmaps u.qcow2)"

# power loss
d=$SCRATCH/crash
mkdir -p "$d"
"$QEMU_IMG" create -q -f qcow2 "$d/img.qcow2" 16M
"$QEMU_IO" -c 'write -P 7 0 2M' "$d/img.qcow2" >/dev/null
"$QEMU_IMG" bitmap --add "$d/img.qcow2" kept
"$QEMU_IO" -c 'write -P 8 4M 1M' "$d/img.qcow2" >/dev/null
"$QEMU_IMG" convert -O raw "$d/img.qcow2" "$d/A0.raw"
crash_op bitmap-add "$d" --expect-raw "$d/A0.raw" -- bitmap --add @IMG@ new
crash_op bitmap-remove "$d" --expect-raw "$d/A0.raw" -- bitmap --remove @IMG@ kept
crash_summary

finish
