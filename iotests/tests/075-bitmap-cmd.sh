#!/bin/bash
# qimg bitmap against qemu-img bitmap (qcow2/bitmap-ops.c):
#  - the same operation sequences on copies of one image give the same
#    bitmap list (qemu-img info --output=json), qemu-img check clean (no
#    leaks), the same messages and exit codes, refusals included;
#  - QEMU uses what qimg made: a bitmap qimg added records qemu-io's writes
#    (qemu-nbd -B, nbdinfo --map), one qimg cleared reads clean, one qimg
#    removed after QEMU filled it leaves no leaked cluster;
#  - --merge from the image itself or from -b FILE [-F fmt] gives the bits
#    qemu-img's gives (QEMU's view through qemu-nbd -B), any granularities,
#    and its refusals (no such bitmap, an inconsistent one, a raw source, a
#    missing file); v2 images and raw files are refused;
#  - power loss during --add and --remove (the crash-state explorer): no
#    state is corrupt and the guest data never changes.
. "${0%/*}/../common.sh"
. "$IOTESTS_DIR/crash/lib.sh"
requires qimg qemu-img qemu-io qemu-nbd nbdinfo python3

bitmaps() { "$QEMU_IMG" info --output=json "$1" | python3 -c '
import json, sys
print(json.load(sys.stdin)["format-specific"]["data"].get("bitmaps"))'; }

"$QEMU_IMG" create -q -f qcow2 base.qcow2 64M
"$QEMU_IO" -c 'write -P 1 0 1M' base.qcow2 >/dev/null
cp base.qcow2 q.qcow2
cp base.qcow2 m.qcow2
# both_ops COMPARE: each line of stdin is "OPTIONS... NAME", run by both
# on q.qcow2 and m.qcow2; exit codes, messages and then COMPARE LABEL.
both_ops() {
    local compare=$1 args name opts
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
        "$compare" "bitmap $args"
    done
}
same_list() { assert_eq "$1: the bitmaps" "$(bitmaps q.qcow2)" "$(bitmaps m.qcow2)"; }
same_bits() {
    for b in t64 t256 off; do
        assert_eq "$1: $b" "$(dirty_map q.qcow2 $b)" "$(dirty_map m.qcow2 $b)"
    done
}

both_ops same_list <<'OPS'
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

# --merge
"$QEMU_IMG" create -q -f qcow2 src.qcow2 64M
"$QEMU_IMG" bitmap --add src.qcow2 s64
"$QEMU_IMG" bitmap --add -g 1M src.qcow2 s1m
"$QEMU_IO" -c 'write 100k 4k' -c 'write 5M 3M' -c 'write 63M 1M' src.qcow2 >/dev/null
"$QEMU_IMG" create -q -f qcow2 brk.qcow2 64M
"$QEMU_IMG" bitmap --add brk.qcow2 bad
"$QEMU_IO" -c 'write 0 64k' -c 'sigraise 9' brk.qcow2 >/dev/null 2>&1
"$QEMU_IMG" create -q -f qcow2 t.qcow2 64M
"$QEMU_IMG" bitmap --add t.qcow2 t64
"$QEMU_IMG" bitmap --add -g 256k t.qcow2 t256
"$QEMU_IMG" bitmap --add --disable t.qcow2 off
"$QEMU_IO" -c 'write 20M 100k' t.qcow2 >/dev/null
cp t.qcow2 q.qcow2
cp t.qcow2 m.qcow2
both_ops same_bits <<'OPS'
--merge s64 -b src.qcow2 -F qcow2 t64
--merge s1m -b src.qcow2 t256
--merge s64 -b src.qcow2 t256
--merge t256 t64
--merge s1m -b src.qcow2 off
--merge nosuch -b src.qcow2 t64
--merge s64 -b src.qcow2 nosuch
--merge s64 -b src.qcow2 -F raw t64
--merge s64 -b nofile t64
--merge bad -b brk.qcow2 t64
--merge t64 --clear --merge s64 -b src.qcow2 t256
OPS
assert_rc "after the merges: check" 0 "$QEMU_IMG" check -q m.qcow2
same_as_qemu_err info m.qcow2
"$QEMU_IMG" create -q -f qcow2 -o compat=0.10 v2.qcow2 1M
"$QIMG" bitmap --add v2.qcow2 x >e.out 2>&1
assert_eq "v2: message" \
    "qimg: Operation add on bitmap x failed: Cannot store dirty bitmaps in qcow2 v2 files" \
    "$(cat e.out)"
truncate -s 1M r.raw
assert_rc "raw: refused" 1 "$QIMG" bitmap --add -f raw r.raw x

# QEMU uses what qimg made
"$QEMU_IMG" create -q -f qcow2 u.qcow2 64M
"$QIMG" bitmap --add u.qcow2 b1
"$QEMU_IO" -c 'write -P 1 1M 64k' -c 'write -P 2 10M 1M' u.qcow2 >/dev/null
assert_eq "QEMU records writes in a bitmap qimg added" \
    "$(printf '%10s %11s %4s  dirty\n%10s %11s %4s  dirty' 1048576 65536 1 10485760 1048576 1)" \
    "$(dirty_map u.qcow2 b1)"
"$QIMG" bitmap --clear u.qcow2 b1
assert_eq "a bitmap qimg cleared is clean to QEMU" "" "$(dirty_map u.qcow2 b1)"
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
