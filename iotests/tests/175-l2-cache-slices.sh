#!/bin/bash
# qcow2's l2-cache-entry-size (issue 29, QEMU 103 and 137): the L2 cache
# holds slices of that many bytes (qcow2/cluster.c invariant 6), compared
# with qemu-io 7.2 on the same input:
#  - the option in open -o, reopen -o, --image-opts and json:, every
#    power of two from 512 to the cluster size, with 4k and 64k clusters
#    and extended L2 entries: the same output as qemu-io, the same guest
#    data afterwards, qemu-img check clean; invalid sizes (not a power of
#    two, below 512, above the cluster size) with QEMU's message;
#  - on the recording node: a write-back of a modified slice writes that
#    slice only (its bytes, at its offset in the table), while a new L2
#    table is written whole before the L1 entry points at it.
. "$(dirname "$0")/../common.sh"
requires qimg qemu-img qemu-io python3

# ---- the option, each way in, against qemu-io ----
for create in cluster_size=4k cluster_size=64k cluster_size=64k,extended_l2=on \
    cluster_size=16k,extended_l2=on; do
    cs=$(numfmt --from=iec "$(sed 's/cluster_size=\([0-9]*k\).*/\1/;s/k/K/' <<<"$create")")
    "$QEMU_IMG" create -q -f qcow2 -o "$create" base.qcow2 64M
    "$QEMU_IO" -c 'write -P 0x21 0 3M' -c 'write -P 0x22 40M 1M' base.qcow2 >/dev/null
    for e in $(printf '%s\n' 512 $((cs / 8)) "$cs" | sort -nu); do
        small="l2-cache-entry-size=$e,l2-cache-size=$((2 * e))"
        IO_IMAGE=t.qcow2 IO_FROM=base.qcow2 same_as_qemu_io "$create open -o $e" \
            -c "open -o $small t.qcow2" -c 'read -P 0x21 0 3M' \
            -c 'write -P 0x31 1M 200k' -c 'write -z 2M 300k' -c 'discard 2560k 128k' \
            -c 'write -P 0x32 33M 70k' -c 'read -P 0x22 40M 1M' -c 'read -P 0x32 33M 70k' \
            -c 'read -P 0x31 1M 200k' -c 'read -P 0 2M 300k' -c 'map'
        IO_IMAGE=t.qcow2 IO_FROM=base.qcow2 same_as_qemu_io "$create reopen -o $e" \
            -c "reopen -o $small" -c 'write -P 0x41 100k 5M' -c 'reopen -o l2-cache-entry-size=512' \
            -c 'read -P 0x41 100k 5M' -c 'write -z -u 0 64M' -c 'read -P 0 0 64M' t.qcow2
        IO_IMAGE=t.qcow2 IO_FROM=base.qcow2 same_as_qemu_io "$create image-opts $e" \
            --image-opts -c 'write -P 0x51 63M 1M' -c 'read -P 0x21 0 3M' \
            -c 'read -P 0x51 63M 1M' "driver=qcow2,file.filename=t.qcow2,$small"
        IO_IMAGE=t.qcow2 IO_FROM=base.qcow2 same_as_qemu_io "$create json $e" \
            -c 'write -P 0x61 10M 9M' -c 'read -P 0x61 10M 9M' \
            "json:{\"driver\":\"qcow2\",\"file\":{\"driver\":\"file\",\"filename\":\"t.qcow2\"},\"l2-cache-entry-size\":$e,\"l2-cache-size\":$((2 * e))}"
    done
    cp base.qcow2 t.qcow2
    for bad in 256 1000 $((cs + 512)) $((2 * cs)) 33k; do
        same_as_qemu_io "$create open -o $bad" -c "open -o l2-cache-entry-size=$bad t.qcow2" \
            -c 'read -P 0x21 0 3M'
    done
    same_as_qemu_io "$create reopen -o 1000" -c "reopen -o l2-cache-entry-size=1000" \
        -c 'read -P 0x21 0 3M' t.qcow2
    same_as_qemu_io "$create image-opts $((2 * cs))" --image-opts -c 'read -P 0x21 0 3M' \
        "driver=qcow2,file.filename=t.qcow2,l2-cache-entry-size=$((2 * cs))"
done

# ---- what reaches the file: slices written alone, new tables whole ----
# l2_writes LOG IMG: the writes into the L2 table of L1 entry 0, as
# "OFFSET-IN-TABLE+LENGTH" lines, in log order (block/record.c format),
# repeats of the same write in a row once (the write path may write a slice
# back more than once before a flush, as it does whole tables).
l2_writes() {
    python3 - "$1" "$2" <<'PY' | uniq
import struct, sys
log, img = sys.argv[1], sys.argv[2]
with open(img, "rb") as f:
    h = f.read(104)
    cs = 1 << struct.unpack_from(">I", h, 20)[0]
    l1 = struct.unpack_from(">Q", h, 40)[0]
    f.seek(l1)
    l2 = struct.unpack(">Q", f.read(8))[0] & 0x00fffffffffffe00
data = open(log, "rb").read()
pos = 16
while pos < len(data):
    typ, fid, off, ln, aux = struct.unpack_from("<IIQQQ", data, pos)
    pos += 32
    if typ in (1, 6):
        pos += ln
    if typ == 1 and off < l2 + cs and off + ln > l2:
        print("%d+%d" % (off - l2, ln))
PY
}
"$QEMU_IMG" create -q -f qcow2 r.qcow2 64M
: >r.log
"$QIMG" io --image-opts -c 'write -P 0x71 0 64k' -c flush -c 'write -P 0x72 20M 64k' -c flush \
    -c 'write -P 0x73 0 64k' -c flush \
    "driver=qcow2,file.filename=record:r.log:r.qcow2,l2-cache-entry-size=4k" >/dev/null
# 20M is entry 320, slice 0 (512 entries of 4k); 0 rewritten in place: no
# L2 write.  The table: whole, then slice 0.
assert_eq "new table whole, then slice 0" "0+65536
0+4096" "$(l2_writes r.log r.qcow2)"
: >r.log
"$QIMG" io --image-opts -c 'write -P 0x74 40M 64k' -c 'write -P 0x75 60M 64k' -c flush \
    "driver=qcow2,file.filename=record:r.log:r.qcow2,l2-cache-entry-size=4k" >/dev/null
# 40M: entry 640, slice 1 (at 4096); 60M: entry 960, slice 1 too
assert_eq "slice 1 only" "4096+4096" "$(l2_writes r.log r.qcow2)"
: >r.log
"$QIMG" io --image-opts -c 'write -P 0x76 63M 64k' -c flush \
    "driver=qcow2,file.filename=record:r.log:r.qcow2,l2-cache-entry-size=512" >/dev/null
# 63M: entry 1008, slice 15 of 64 entries (at 7680)
assert_eq "a 512-byte slice" "7680+512" "$(l2_writes r.log r.qcow2)"
assert_rc "recorded image: check" 0 "$QEMU_IMG" check r.qcow2
assert_eq "recorded image: data" "" "$("$QEMU_IO" -c 'read -P 0x73 0 64k' -c 'read -P 0x72 20M 64k' \
    -c 'read -P 0x74 40M 64k' -c 'read -P 0x75 60M 64k' -c 'read -P 0x76 63M 64k' \
    -c 'read -P 0 64k 19M' r.qcow2 | grep -i pattern)"
finish
