#!/bin/bash
# Persistent dirty bitmaps (meta.c invariant 8, bitmap-store.c): a guest
# write, zero write, discard or compressed write sets the bits QEMU sets
# for it (the same command through qemu-io, compared through qemu-nbd -B)
# and close stores them consistent; reads, snapshot creation and the
# vmstate area set none.  qemu-img check stays clean.  info lists them as
# qemu-img does.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io qemu-nbd nbdinfo python3

# in_use IMG: one line per bitmap, "NAME in-use" or "NAME ok".
in_use() {
    "$QEMU_IMG" info --output=json "$1" | python3 -c '
import json, sys
d = json.load(sys.stdin)
for b in d["format-specific"]["data"].get("bitmaps", []):
    print(b["name"], "in-use" if "in-use" in b["flags"] else "ok")
'
}

fresh() {
    rm -f "$1"
    "$QEMU_IMG" create -q -f qcow2 "$1" 64M || exit 1
    "$QEMU_IMG" bitmap --add "$1" b0 || exit 1
    "$QEMU_IMG" bitmap --add -g 128k "$1" b1 || exit 1
}

clean="b0 ok
b1 ok"

fresh a.qcow2
assert_eq "fresh" "$clean" "$(in_use a.qcow2)"
"$QIMG" io -c 'read 0 64k' a.qcow2 >/dev/null
assert_eq "after a read" "$clean" "$(in_use a.qcow2)"
"$QIMG" snapshot -c s1 a.qcow2
assert_eq "after snapshot -c" "$clean" "$(in_use a.qcow2)"
"$QIMG" io -c 'write -b -P 5 0 64k' a.qcow2 >/dev/null
assert_eq "after a vmstate write" "$clean" "$(in_use a.qcow2)"
assert_rc "check before writing" 0 "$QEMU_IMG" check a.qcow2

for cmd in 'write -P 1 0 4k' 'write -z 0 64k' 'discard 0 64k' 'write -c -P 2 64k 64k' \
    'write -P 3 200k 1k' 'write -z 1M 300k' 'discard 3M 100k' 'write 64M-1k 1k'; do
    fresh b.qcow2
    fresh q.qcow2
    "$QIMG" io -c "$cmd" b.qcow2 >/dev/null
    "$QEMU_IO" -c "$cmd" q.qcow2 >/dev/null
    assert_eq "after $cmd" "$clean" "$(in_use b.qcow2)"
    for b in b0 b1; do
        assert_eq "after $cmd: $b as QEMU's" "$(dirty_map q.qcow2 $b)" "$(dirty_map b.qcow2 $b)"
    done
    assert_rc "check after $cmd" 0 "$QEMU_IMG" check b.qcow2
done

# convert -n into an image with bitmaps writes guest data
fresh c.qcow2
fresh qc.qcow2
truncate -s 64M src.raw
printf 'x' | dd of=src.raw bs=1 seek=100000 conv=notrunc status=none
"$QIMG" convert -n -f raw -O qcow2 src.raw c.qcow2
"$QEMU_IMG" convert -n -f raw -O qcow2 src.raw qc.qcow2
assert_eq "after convert -n" "$clean" "$(in_use c.qcow2)"
assert_eq "after convert -n: the bits as QEMU's" "$(dirty_map qc.qcow2 b0)" \
    "$(dirty_map c.qcow2 b0)"
assert_rc "convert -n: same contents" 0 "$QEMU_IMG" compare -f raw src.raw c.qcow2

# info lists the bitmaps as qemu-img does (bitmap.c): enabled, disabled,
# in use, several granularities; none without the autoclear bit
same_as_qemu_err info a.qcow2
same_as_qemu_err info --output=json c.qcow2
fresh d.qcow2
"$QEMU_IMG" bitmap --add -g 4k --disable d.qcow2 off
"$QEMU_IMG" bitmap --add -g 1M d.qcow2 with_a_longer_name
same_as_qemu_err info d.qcow2
same_as_qemu_err info --output=json d.qcow2
same_as_qemu_err info --output=json --backing-chain d.qcow2
python3 - d.qcow2 <<'PY'
import struct, sys
with open(sys.argv[1], "r+b") as f:  # clear the bitmaps autoclear bit
    f.seek(88)
    v = struct.unpack(">Q", f.read(8))[0]
    f.seek(88)
    f.write(struct.pack(">Q", v & ~1))
PY
# (QEMU also warns at every open that the bitmaps are inconsistent now;
# qimg does not)
same_as_qemu info d.qcow2

# A read-write open marks every consistent bitmap in use, a disabled one
# too, as QEMU's does (bitmap-store.c invariant 1): a crash before any
# write (qemu-io's abort) leaves them in use, and convert --bitmaps then
# refuses them as qemu-img does (QEMU's qemu-img-bitmaps)
fresh f.qcow2
"$QEMU_IMG" bitmap --add --disable f.qcow2 off
cp f.qcow2 g.qcow2
"$QEMU_IO" -c abort f.qcow2 >/dev/null 2>&1
"$QIMG" io -c abort g.qcow2 >/dev/null 2>&1
assert_eq "abort after the open: in use as QEMU leaves them" "b0 in-use
b1 in-use
off in-use" "$(in_use g.qcow2)"
assert_eq "abort after the open: as qemu-io" "$(in_use f.qcow2)" "$(in_use g.qcow2)"
rm -f g.copy
same_as_qemu_err convert --bitmaps -O qcow2 g.qcow2 g.copy
fresh f.qcow2
"$QEMU_IMG" bitmap --add --disable f.qcow2 off
"$QIMG" io -c 'write 0 64k' f.qcow2 >/dev/null
assert_eq "a clean close clears them, the disabled one too" "b0 ok
b1 ok
off ok" "$(in_use f.qcow2)"
assert_eq "the disabled one's bits are unchanged" "" "$(dirty_map f.qcow2 off)"

# Every open checks the directory under QEMU's rules (bitmap.c invariant
# 3): an entry QEMU does not support (the spec's extra_data_compatible
# flag, another type, granularity out of range) fails every command as
# qemu-img's and qemu-io's ("doesn't satisfy the constraints", QEMU 242)
bad_entry() { # bad_entry IMG FIELD-OFFSET SIZE VALUE: set a field of entry 0
    python3 - "$@" <<'PY'
import struct, sys
img, field, size, value = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4], 0)
with open(img, "r+b") as f:
    h = f.read(4096)
    p = struct.unpack(">I", h[100:104])[0]  # header length: extensions follow
    while True:
        t, n = struct.unpack(">II", h[p:p + 8])
        if t == 0x23852875:
            d = struct.unpack(">Q", h[p + 24:p + 32])[0]
            break
        p += 8 + ((n + 7) & ~7)
    f.seek(d + field)
    fmt = {1: ">B", 4: ">I"}[size]
    f.write(struct.pack(fmt, value))
PY
}
for c in "12 4 0x6" "12 4 0xa" "16 1 2" "17 1 8" "17 1 32"; do
    fresh e.qcow2
    # shellcheck disable=SC2086
    bad_entry e.qcow2 $c
    sum=$(md5sum <e.qcow2)
    for cmd in "info" "info -U" "check" "map --output=json" "convert -O raw e.qcow2 e.raw"; do
        # shellcheck disable=SC2086
        same_as_qemu_err $cmd $([ "${cmd%% *}" = convert ] || echo e.qcow2)
    done
    same_as_qemu_io "bitmap entry $c: io" -c 'write 0 4k' e.qcow2
    assert_eq "bitmap entry $c: nothing written" "$sum" "$(md5sum <e.qcow2)"
done
finish
