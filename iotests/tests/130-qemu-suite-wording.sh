#!/bin/bash
# qemu-img's words where QEMU's own iotests read them (issue 29 item 4),
# each against qemu-img 7.2 on the same input:
#  - unknown incompatible features named from the image's feature-name
#    table, a last entry shorter than 48 bytes included (QEMU 036);
#  - "Image is too big" for a virtual size past the L1 limit (054);
#  - "Invalid option list: X" for an -o argument qemu-img refuses (empty,
#    a leading comma, an odd number of trailing ones), in create, convert,
#    amend and measure (082);
#  - "Format driver 'F' does not support image creation" for a driver QEMU
#    has without image creation, in create and convert (082);
#  - create -b file:ABSOLUTE with the new image in another folder: the
#    backing name with a protocol prefix is not joined to that folder (228);
#  - check -r all of a refcount block whose end would overflow: "ERROR
#    could not resize image: Invalid argument" (108);
#  - an image marked corrupt during a write closes without a further
#    "Failed to flush" line (305), and with the exit code qemu-io has;
#  - bitmap's long options --granularity, --source-file, --source-format
#    (190): the bitmaps they add and merge, as qemu-img reads them back;
#  - compare's read error: the errno's text alone, for an error blkdebug
#    injects too, and (stdout not flushed first) before the lines printed
#    earlier when both go to one pipe (074);
#  - convert -C with -c, -S or --salvage: qemu-img's refusals, in its order
#    (082); without them -C converts, silently as qemu-img (copy
#    offloading itself: iotest 178).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io qemu-nbd nbdinfo python3

# ---- feature-name table (036) ----
qi create -q -f qcow2 f.qcow2 64M
python3 - f.qcow2 <<'PY' # incompatible bits 61-63; a table naming 63 only, 14 bytes
import struct, sys
with open(sys.argv[1], "r+b") as f:
    d = bytearray(f.read(65536))
    v = struct.unpack(">Q", d[72:80])[0]
    d[72:80] = struct.pack(">Q", v | (7 << 61))
    hlen = struct.unpack(">I", d[100:104])[0]
    # drop the extensions, then: the feature table (one short entry), end
    ent = b"\x00\x3fTest feature"
    ext = struct.pack(">II", 0x6803F857, len(ent)) + ent
    ext += b"\0" * (-len(ext) % 8) + struct.pack(">II", 0, 0)
    d[hlen:hlen + len(ext) + 8] = ext + b"\0" * 8
    f.seek(0)
    f.write(d)
PY
same_as_qemu_err info f.qcow2
same_as_qemu_err check f.qcow2

# ---- Image is too big (054) ----
qi create -q -f qcow2 big.qcow2 1M
python3 - big.qcow2 <<'PY' # virtual size 2^60
import struct, sys
with open(sys.argv[1], "r+b") as f:
    f.seek(24)
    f.write(struct.pack(">Q", 1 << 60))
PY
same_as_qemu_err info big.qcow2
same_as_qemu_err check big.qcow2

# ---- Invalid option list (082) ----
qi create -q -f qcow2 s.qcow2 1M
for o in "backing_file=s.qcow2," ",help" ",," "" "size=1M,,," "cluster_size=4k,,"; do
    rm -f t.qcow2
    same_as_qemu_err create -f qcow2 -o "$o" -o help t.qcow2 1M
    same_as_qemu_err create -f qcow2 -o cluster_size=4k -o "$o" t.qcow2 1M
    rm -f t.qcow2
    same_as_qemu_err convert -O qcow2 -o "$o" s.qcow2 t.qcow2
    rm -f t.qcow2
    same_as_qemu_err measure -O qcow2 -o "$o" --size 1M
    cp s.qcow2 a.qcow2
    same_as_qemu_err amend -o "$o" a.qcow2
done

# ---- drivers without image creation (082) ----
for f in bochs cloop dmg null-co blkdebug vvfat copy-on-read throttle foo; do
    rm -f t.img
    same_as_qemu_err create -f $f -o help
    same_as_qemu_err create -f $f t.img 1M
    same_as_qemu_err convert -O $f -o help s.qcow2 t.img
    same_as_qemu_err convert -O $f s.qcow2 t.img
done

# ---- a backing name with a "file:" prefix (228) ----
mkdir -p sub
qi create -q -f qcow2 "$PWD/sub/base.img" 1M
for b in "file:$PWD/sub/base.img" "file:sub/base.img" "$PWD/sub/base.img"; do
    rm -f sub/top.img
    same_as_qemu_err create -f qcow2 -b "$b" -F qcow2 "$PWD/sub/top.img"
    same_as_qemu_err info -U "$PWD/sub/top.img"
done

# ---- commas in a value of the "Formatting" line are doubled (020) ----
rm -f c.qcow2
same_as_qemu_err create -f qcow2 -u -F qcow2 \
    -b "json:{'driver': 'qcow2', 'file': {'driver': 'file', 'filename': 'a,b'}}" c.qcow2 1M

# ---- a refcount block past 2^63 (108) ----
for e in '\x7f\xff\xff\xff\xff\xff\x00\x00' '\xff\xff\xff\xff\xff\xff\x00\x00'; do
    qi create -q -f qcow2 r.qcow2 64M
    printf "$e" | dd of=r.qcow2 bs=1 seek=$((0x10008)) conv=notrunc status=none
    cp r.qcow2 r2.qcow2
    "$QEMU_IMG" check -r all r.qcow2 >rq.out 2>&1
    qrc=$?
    "$QIMG" check -r all r2.qcow2 >rm.out 2>&1
    mrc=$?
    assert_eq "108 $e: exit code" "$qrc" "$mrc"
    assert_eq "108 $e: output" "$(sed 's/^qemu-img: /qimg: /' rq.out)" "$(cat rm.out)"
done

# ---- no flush-failure line after the corruption (305) ----
qi create -q -f qcow2 -o refcount_bits=64,cluster_size=1k c.qcow2 1M
qio c.qcow2 'write 0 124k'
qio c.qcow2 'discard 121k 1k'
qio c.qcow2 'discard 123k 1k'
python3 - c.qcow2 <<'PY' # the second refcount block's offset, unaligned
import struct, sys
with open(sys.argv[1], "r+b") as f:
    f.seek(48)
    rt = struct.unpack(">Q", f.read(8))[0]
    f.seek(rt + 14)
    f.write(b"\x06")
PY
cp c.qcow2 cq.qcow2
cp c.qcow2 cm.qcow2
"$QEMU_IO" -c 'write 121k 3k' cq.qcow2 >cq.out 2>cq.err
qrc=$?
"$QIMG" io -c 'write 121k 3k' cm.qcow2 >cm.out 2>cm.err
mrc=$?
assert_eq "305: exit code" "$qrc" "$mrc"
assert_eq "305: stdout" "$(cat cq.out)" "$(cat cm.out)"
assert_eq "305: stderr" "$(sed 's/^qemu-io: /qimg: /' cq.err)" "$(cat cm.err)"

# ---- bitmap --granularity, --source-file, --source-format (190) ----
# bitmaps T TOOL...: TOOL adds b1 (512 bytes) and b2 (2M) to gT.qcow2 and
# merges sT.qcow2's bitmap src (64k dirty at 1M) into b2
bitmaps() {
    local t=$1
    shift
    qi create -q -f qcow2 "g$t.qcow2" 64M
    qi create -q -f qcow2 "s$t.qcow2" 64M
    qi bitmap --add -f qcow2 "s$t.qcow2" src
    qio "s$t.qcow2" 'write 1M 64k'
    "$@" --add --granularity 512 -f qcow2 "g$t.qcow2" b1 &&
        "$@" --add --granularity 2M -f qcow2 "g$t.qcow2" b2 &&
        "$@" --merge src --source-file "s$t.qcow2" --source-format qcow2 -f qcow2 \
            "g$t.qcow2" b2
    echo "rc $?"
}
assert_eq "190: bitmap long options: exit codes" "$(bitmaps q "$QEMU_IMG" bitmap 2>&1)" \
    "$(bitmaps m "$QIMG" bitmap 2>&1)"
assert_eq "190: the bitmaps added and merged" \
    "$("$QEMU_IMG" info --output=json gq.qcow2 | sed -n '/"bitmaps"/,/]/p')" \
    "$("$QEMU_IMG" info --output=json gm.qcow2 | sed -n '/"bitmaps"/,/]/p')"
assert_eq "190: the merged bits" "$(dirty_map gq.qcow2 b2 2>&1)" "$(dirty_map gm.qcow2 b2 2>&1)"

# ---- compare's read error (074) ----
qi create -q -f qcow2 c1.qcow2 1G
qio c1.qcow2 'write -P 102 512 512'
cp c1.qcow2 c2.qcow2
printf '[inject-error]\nevent = "read_aio"\nerrno = "5"\nonce ="off"\n' >bd.conf
same_as_qemu_err compare "blkdebug:$PWD/bd.conf:$PWD/c1.qcow2" c2.qcow2
printf '[inject-error]\nevent = "read_aio"\nerrno = "28"\n' >bd.conf
same_as_qemu_err compare "blkdebug:$PWD/bd.conf:$PWD/c1.qcow2" c2.qcow2
# stdout is not flushed before the error: with 2>&1 into a pipe, the error
# comes before the size warning printed earlier, as with qemu-img (074)
printf '[inject-error]\nevent = "read_aio"\nerrno = "5"\nonce ="off"\n' >bd.conf
qi create -q -f qcow2 c0.qcow2 0
assert_eq "074: line order" \
    "$("$QEMU_IMG" compare "blkdebug:$PWD/bd.conf:$PWD/c1.qcow2" c0.qcow2 2>&1 | io_filter)" \
    "$("$QIMG" compare "blkdebug:$PWD/bd.conf:$PWD/c1.qcow2" c0.qcow2 2>&1 | io_filter)"

# ---- convert -C (082) ----
for args in "-C -S 4k" "-C -c" "-C --salvage" "-C -c -S 4k --salvage" "-C -S 0 --salvage" \
    "-C --skip-broken-bitmaps"; do
    # shellcheck disable=SC2086
    same_as_qemu_err convert $args -O qcow2 c1.qcow2 c3.qcow2
done
same_as_qemu_err convert -C -O qcow2 c1.qcow2 c3.qcow2
assert_rc "convert -C: contents" 0 "$QEMU_IMG" compare -q c1.qcow2 c3.qcow2

finish
