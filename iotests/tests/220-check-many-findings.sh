#!/bin/bash
# 220-check-many-findings: qimg check's findings, one line each on stderr
# (tools/check.c facts 1 and 9), are byte for byte qemu-img 7.2's when there
# are many: a refcount table whose 8 entries point at unaligned refcount
# blocks makes every one of the 16384 clusters they cover a "Can't get
# refcount for cluster N" line (qcow2/check-refs.c), ~900 KiB, written in
# batches (tools/check.c fact 9) and their repeated corruption events
# counted without their message formatted.  Compared: stderr (every byte,
# so a line lost, doubled or cut at a batch's end shows), stdout, the exit
# code, and both merged into one file (the order of the two streams), for
# check and check --output=json; and check -r all up to its rebuild (where
# qimg differs from qemu-img on purpose: test-qcow2-check-refs.c,
# test_refblock_broken), with its finding lines as plain check's.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3

# a.qcow2: 4 KiB clusters (2048 per refcount block), a 64 MiB file (16384
# clusters), reftable entries 0..7 unaligned (0x200 into a cluster)
"$QEMU_IMG" create -q -f qcow2 -o cluster_size=4k a.qcow2 64M || exit 1
qio a.qcow2 'write -P 1 0 64k'
truncate -s 64M a.qcow2
python3 - a.qcow2 <<'PY' || exit 1
import struct, sys
with open(sys.argv[1], "r+b") as f:
    h = f.read(104)
    rt = struct.unpack(">Q", h[48:56])[0]
    f.seek(rt)
    block0 = struct.unpack(">Q", f.read(8))[0]
    for i in range(8):
        f.seek(rt + 8 * i)
        f.write(struct.pack(">Q", block0 + 0x200 + i * 0x1000))
PY

# both TAG ARGS...: qemu-img and qimg ARGS on copies of a.qcow2; TAG.{q,m}.
# {out,err,all}: stdout, stderr (qemu-img's prefix as qimg's), both merged
both() {
    local tag=$1 t
    shift
    for t in q m; do
        cp a.qcow2 "$tag.$t.qcow2"
    done
    "$QEMU_IMG" "$@" "$tag.q.qcow2" >"$tag.q.out" 2>"$tag.q.err"
    echo $? >"$tag.q.rc"
    "$QIMG" "$@" "$tag.m.qcow2" >"$tag.m.out" 2>"$tag.m.err"
    echo $? >"$tag.m.rc"
    for t in q m; do
        cp a.qcow2 "$tag.$t.qcow2"
    done
    "$QEMU_IMG" "$@" "$tag.q.qcow2" >"$tag.q.all" 2>&1
    "$QIMG" "$@" "$tag.m.qcow2" >"$tag.m.all" 2>&1
    for f in "$tag.q.err" "$tag.q.all"; do
        sed -i -e 's/^qemu-img: /qimg: /' -e "s/$tag\.q\.qcow2/$tag.m.qcow2/g" "$f"
    done
    sed -i "s/$tag\.q\.qcow2/$tag.m.qcow2/g" "$tag.q.out"
}
# same TAG DESC PART [LINES]: TAG.q.PART and TAG.m.PART are the same bytes
# (LINES: their first LINES lines)
same() {
    local a=$1.q.$3 b=$1.m.$3
    if [ -n "${4:-}" ]; then
        head -n "$4" "$a" >"$a.head" && a=$a.head
        head -n "$4" "$b" >"$b.head" && b=$b.head
    fi
    _checks=$((_checks + 1))
    if ! cmp -s "$a" "$b"; then
        _fail "$2: $3 differs from qemu-img's (- qemu-img, + qimg)"
        diff -u --label qemu-img --label qimg "$a" "$b" | head -n 20
    fi
}

for mode in human json; do
    both "$mode" check --output=$mode
    assert_eq "check --output=$mode: the findings are many" 16384 \
        "$(grep -c "^Can't get refcount for cluster [0-9]*: Input/output error$" "$mode.m.err")"
    for part in err out all rc; do
        same "$mode" "check --output=$mode" "$part"
    done
done

# -r all: the same findings (and the first corruption event's "Marking
# image as corrupt" line among them, the only one formatted), then the
# rebuild, where qimg and qemu-img part
both all check -r all
n=$(grep -n '^Rebuilding refcount structure$' all.q.err | cut -d: -f1)
assert_rc "check -r all: qemu-img rebuilds" 0 test -n "$n"
same all "check -r all, up to the rebuild" err "${n:-0}"
assert_eq "check -r all: the findings of plain check" \
    "$(grep -v -e '^qimg: ' -e '^qcow2: ' human.m.err)" \
    "$(head -n "${n:-0}" all.m.err | grep -v -e '^qimg: ' -e '^qcow2: ' -e '^Rebuilding')"
assert_eq "check -r all: the corruption event, once" \
    "qcow2: Marking image as corrupt: Refblock offset 0x2200 unaligned (reftable index: 0); further corruption events will be suppressed" \
    "$(grep '^qcow2: ' all.m.err)"
assert_eq "check -r all: the repair's end" \
    "$(printf '%s\n' 'Repairing cluster 1 refcount=1 reference=0' \
        'qimg: Check failed: No medium found')" \
    "$(tail -n +$((${n:-0} + 1)) all.m.err)"
finish
