#!/bin/bash
# At close, a read-write open stores every bitmap it loaded, as QEMU 7.2
# does (qcow2_inactivate; QEMU iotest 303; qcow2/bitmap-store.c invariant
# 6): enabled and disabled ones, changed or not, each gets new data
# clusters and a new table in directory order, then a new directory.  A
# sequence of qemu-io and qemu-img commands, run by qemu's tools and by
# qimg on copies of one image, leaves the same layout after each step --
# the file's length, the directory's and every table's offset and entries,
# every cluster's refcount (the style of iotest 153) -- and a clean check.
# A bitmap left in use (inconsistent) is left as it is.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3

layout() {
    python3 "$IOTESTS_DIR/tests/020-qcow2edit.py" "$1" layout
}

run_seq() { # run_seq IMAGE-SETUP: the steps below on q (qemu) and m (qimg)
    cp base.qcow2 q.qcow2
    cp base.qcow2 m.qcow2
    step=0
    while IFS='|' read -r tool args; do
        step=$((step + 1))
        # shellcheck disable=SC2086
        if [ "$tool" = io ]; then
            "$QEMU_IO" -c "$args" q.qcow2 >/dev/null
            "$QIMG" io -c "$args" m.qcow2 >/dev/null
        else
            eval "\"\$QEMU_IMG\" $args q.qcow2" >/dev/null
            eval "\"\$QIMG\" $args m.qcow2" >/dev/null
        fi
        assert_eq "$1: $step: $tool $args: layout" "$(layout q.qcow2)" "$(layout m.qcow2)"
        assert_rc "$1: $step: $tool $args: check" 0 "$QEMU_IMG" check -q m.qcow2
    done <<'STEPS'
io|read 0 512
io|write 0 1M
io|write -P 5 3M 64k
io|discard 0 64k
io|read 8M 4k
img|snapshot -c s1
io|write -z 5M 1M
img|bitmap --disable b1
io|write 9M 64k
img|snapshot -d s1
STEPS
}

# QEMU 303's shape: an enabled and a disabled bitmap
"$QEMU_IMG" create -q -f qcow2 base.qcow2 10M
"$QEMU_IMG" bitmap --add -g 32k base.qcow2 b1
"$QEMU_IO" -c 'write 0 2M' base.qcow2 >/dev/null
"$QEMU_IMG" bitmap --add -g 64k --disable base.qcow2 b2
"$QEMU_IO" -c 'write 6M 1M' base.qcow2 >/dev/null
run_seq "enabled and disabled"

# disabled ones only; then one left in use by a crash (inconsistent)
"$QEMU_IMG" create -q -f qcow2 base.qcow2 10M
"$QEMU_IMG" bitmap --add -g 512 base.qcow2 d1
"$QEMU_IO" -c 'write 1M 1M' base.qcow2 >/dev/null
"$QEMU_IMG" bitmap --disable base.qcow2 d1
"$QEMU_IMG" bitmap --add --disable base.qcow2 d2
run_seq "disabled only"

"$QEMU_IMG" bitmap --add -g 128k base.qcow2 e1
python3 - base.qcow2 <<'PY' # d2 in use (flags bit 0), as after a crash
import struct, sys
with open(sys.argv[1], "r+b") as f:
    d = f.read(1 << 20)
    hlen = struct.unpack(">I", d[100:104])[0]
    p = hlen
    while True:
        magic, ln = struct.unpack(">II", d[p:p + 8])
        if magic == 0x23852875:
            nb, _, dsz, doff = struct.unpack(">IIQQ", d[p + 8:p + 32])
            break
        p += 8 + (ln + 7) // 8 * 8
    f.seek(doff)
    dirb = bytearray(f.read(dsz))
    q = 0
    for i in range(nb):
        esz = struct.unpack(">I", dirb[q + 20:q + 24])[0]
        nsz = struct.unpack(">H", dirb[q + 18:q + 20])[0]
        name = bytes(dirb[q + 24 + esz:q + 24 + esz + nsz])
        if name == b"d2":
            flags = struct.unpack(">I", dirb[q + 12:q + 16])[0]
            dirb[q + 12:q + 16] = struct.pack(">I", flags | 1)
        q += (24 + esz + nsz + 7) // 8 * 8
    f.seek(doff)
    f.write(dirb)
PY
run_seq "one in use"
finish
