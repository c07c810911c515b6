#!/bin/bash
# What convert sends to the target for zeros, counted on the recording node
# (record:LOG:FILE, block/record.c; iotests/reclog.py sums the log up), and
# block devices as targets and sources (loop devices, 512-byte and 4 KiB
# logical blocks):
#  - no pre-zeroing, ever: no range gets a zero request and data
#    (copy.c invariant 2);
#  - a new file target gets no zero request at all, nor does --target-is-zero;
#  - an existing target (-n) gets zero requests exactly for the ranges the
#    source holds no data for, as unmap (punch-hole) requests unless it has a
#    backing file: its data bytes and zero bytes add up to the size;
#  - a qcow2 target (-n) gets qemu-img's zero clusters (same map);
#  - a block device gets BLKZEROOUT in whole logical blocks, the unaligned
#    head and tail written (file.c invariant 12); with O_DIRECT on 4 KiB
#    sectors the writes are aligned to them (copy-plan.c fact 2); raw and
#    qcow2 on the device read back as the source, qcow2 checks clean;
#  - a full disk ends the copy with the first error and its offset.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3

RECLOG="python3 $IOTESTS_DIR/reclog.py"
MiB=$((1024 * 1024))
SIZE=$((40 * MiB))

# data [0, 8M), explicit zeros [8M, 12M), a hole, data [20M, 21M), a hole,
# data [32M, 32M + 64K), a hole to 40M; and s512.raw: data runs and zero
# runs on 512-byte boundaries, an unaligned end.
python3 - <<'PY'
import random
random.seed(18)
def rnd(n):
    return random.getrandbits(8 * n).to_bytes(n, 'little')
M = 1 << 20
with open('src.raw', 'wb') as f:
    f.truncate(40 * M)
    f.seek(0); f.write(rnd(8 * M))
    f.seek(8 * M); f.write(b'\0' * (4 * M))
    f.seek(20 * M); f.write(rnd(M))
    f.seek(32 * M); f.write(rnd(65536))
with open('s512.raw', 'wb') as f:
    f.truncate(8 * M + 512)
    f.seek(0); f.write(rnd(M))
    f.seek(M + 512); f.write(rnd(1024))
    f.seek(3 * M); f.write(rnd(512))
    f.seek(4 * M + 1536); f.write(rnd(4096 * 3 + 512))
    f.seek(8 * M); f.write(rnd(512))
PY
DATA=$((8 * MiB + MiB + 65536))

# field LINE NAME: one number of a reclog.py line
field() {
    sed -n "s/.* $2=\\([0-9]*\\).*/\\1/p; s/^$2=\\([0-9]*\\).*/\\1/p" <<<"$1" | head -n 1
}

# counts DESC LOG WRITE_BYTES ZERO_BYTES: what the log says went to the file
counts() {
    local line
    line=$($RECLOG "$2")
    assert_eq "$1: data bytes" "$3" "$(field "$line" write_bytes)"
    assert_eq "$1: zero bytes" "$4" "$(field "$line" zero_bytes)"
    assert_eq "$1: bytes both zeroed and written" 0 "$(field "$line" overlap_bytes)"
    assert_eq "$1: discards" 0 "$(field "$line" discards)"
}

# 1. A new raw file: the file reads as zeros, so only data is written.
rm -f l1 new.raw
assert_rc "convert to a new raw file" 0 \
    "$QIMG" convert -f raw -O raw src.raw "record:$PWD/l1:$PWD/new.raw"
assert_rc "new raw file: the source's bytes" 0 cmp src.raw new.raw
counts "new raw file" l1 "$DATA" 0

# 2. -n into a raw file full of 0x77: zeros for exactly what has no data,
# punched (unmap), so the file ends up sparse.
"$QEMU_IMG" create -q -f raw old.raw 40M
"$QEMU_IO" -f raw -c 'write -P 0x77 0 40M' old.raw >/dev/null
rm -f l2
assert_rc "convert -n into a written raw file" 0 \
    "$QIMG" convert -n -f raw -O raw src.raw "record:$PWD/l2:$PWD/old.raw"
assert_rc "convert -n: the source's bytes" 0 cmp src.raw old.raw
counts "convert -n raw" l2 "$DATA" $((SIZE - DATA))
line=$($RECLOG l2)
assert_eq "convert -n raw: every zero request may unmap" "$(field "$line" zeros)" \
    "$(field "$line" unmap_zeros)"
used=$(($(stat -c %b old.raw) * 512))
_checks=$((_checks + 1))
[ "$used" -le $((DATA + MiB)) ] || _fail "convert -n raw: $used bytes allocated, data is $DATA"

# 3. --target-is-zero: nothing but data, even with -n.
"$QEMU_IMG" create -q -f raw zero.raw 40M
rm -f l3
assert_rc "convert -n --target-is-zero" 0 \
    "$QIMG" convert -n --target-is-zero -f raw -O raw src.raw "record:$PWD/l3:$PWD/zero.raw"
assert_rc "--target-is-zero: the source's bytes" 0 cmp src.raw zero.raw
counts "--target-is-zero" l3 "$DATA" 0

# 4. -S 0: zeros are data; no zero request at all.
rm -f l4 full.raw
assert_rc "convert -S 0" 0 "$QIMG" convert -S 0 -f raw -O raw src.raw "record:$PWD/l4:$PWD/full.raw"
counts "-S 0" l4 "$SIZE" 0

# 5. -n into a written qcow2 (with and without a backing file): zero
# clusters where qemu-img makes them, its map, check clean.
"$QEMU_IMG" create -q -f qcow2 base.qcow2 40M
"$QEMU_IO" -c 'write -P 0x55 0 40M' base.qcow2 >/dev/null
for backing in none base; do
    for tool in q m; do
        rm -f "$tool.qcow2"
        if [ $backing = base ]; then
            "$QEMU_IMG" create -q -f qcow2 -b base.qcow2 -F qcow2 "$tool.qcow2" 40M
        else
            "$QEMU_IMG" create -q -f qcow2 "$tool.qcow2" 40M
        fi
        "$QEMU_IO" -c 'write -P 0x66 4M 30M' "$tool.qcow2" >/dev/null
    done
    "$QEMU_IMG" convert -n -f raw -O qcow2 src.raw q.qcow2
    assert_rc "convert -n qcow2 (backing $backing)" 0 \
        "$QIMG" convert -n -f raw -O qcow2 src.raw m.qcow2
    assert_rc "convert -n qcow2 (backing $backing): contents" 0 \
        "$QEMU_IMG" compare -f raw src.raw m.qcow2
    assert_rc "convert -n qcow2 (backing $backing): check" 0 "$QEMU_IMG" check m.qcow2
    assert_eq "convert -n qcow2 (backing $backing): qemu-img's map" \
        "$(map_flags q.qcow2)" "$(map_flags m.qcow2)"
done

# 6. -n into a qcow2 with zero runs inside data clusters (-S 512, 16
# requests in flight): partial-cluster zeros are written as data, in the
# allocation turn (write.c invariant 12), never deadlocking against it.
for S in 512 4k; do
    rm -f m.qcow2
    "$QEMU_IMG" create -q -f qcow2 m.qcow2 40M
    "$QEMU_IO" -c 'write -P 0x66 0 40M' m.qcow2 >/dev/null
    assert_rc "convert -n -S $S -m 16 into a written qcow2" 0 \
        timeout -k 5 60 "$QIMG" convert -n -S "$S" -m 16 -f raw -O qcow2 s512.raw m.qcow2
    assert_rc "convert -n -S $S qcow2: check" 0 "$QEMU_IMG" check m.qcow2
    rm -f back.raw
    "$QEMU_IMG" convert -f qcow2 -O raw m.qcow2 back.raw
    assert_rc "convert -n -S $S qcow2: contents" 0 cmp -n $((8 * MiB + 512)) s512.raw back.raw
done

# 7. Block devices.  Loop devices need root and /dev/loop-control; a
# machine without them skips this part (and says so), never silently.
loops=()
# shellcheck disable=SC2317
loop_cleanup() {
    local d
    for d in "${loops[@]}"; do
        losetup -d "$d" 2>/dev/null
    done
    mountpoint -q "$SCRATCH/small" 2>/dev/null && umount "$SCRATCH/small"
    _cleanup
}
trap loop_cleanup EXIT
new_loop() { # SECTOR_SIZE FILE: prints the device
    truncate -s 48M "$2"
    losetup -f --show --sector-size "$1" "$2" 2>/dev/null
}
if ! command -v losetup >/dev/null 2>&1 || [ "$(id -u)" != 0 ] ||
    ! dev512=$(new_loop 512 back512.img) || [ -z "$dev512" ]; then
    [ "$_failures" = 0 ] && missing "no loop devices here (losetup needs root); file targets passed"
    finish
fi
loops+=("$dev512")
dev4k=$(new_loop 4096 back4k.img) || dev4k=
[ -n "$dev4k" ] && loops+=("$dev4k")
_checks=$((_checks + 1))
[ -n "$dev4k" ] || _fail "no 4 KiB-sector loop device"
assert_eq "loop device has 4 KiB logical blocks" 4096 "$(blockdev --getss "$dev4k")"

fill() { # DEVICE: garbage everywhere
    "$QEMU_IO" -f raw -c 'write -P 0xaa 0 48M' "$1" >/dev/null
}

for dev in "$dev512" "$dev4k"; do
    ss=$(blockdev --getss "$dev")
    for cache in writeback none; do
        d="raw on ${ss}-byte sectors, -t $cache"
        fill "$dev"
        rm -f lb
        # no -n: a device is "created" by checking its size, as qemu-img
        assert_rc "$d: convert" 0 \
            "$QIMG" convert -t "$cache" -f raw -O raw src.raw "record:$PWD/lb:$dev"
        assert_rc "$d: the source's bytes" 0 cmp -n "$SIZE" src.raw "$dev"
        # a device does not read as zeros: zeros for what has no data
        counts "$d" lb "$DATA" $((SIZE - DATA))
        # unaligned zero and data runs (-S 512): BLKZEROOUT in whole
        # blocks, the rest written; with O_DIRECT every request aligned
        fill "$dev"
        rm -f lb
        assert_rc "$d, -S 512: convert" 0 \
            "$QIMG" convert -n -S 512 -t "$cache" -f raw -O raw s512.raw "record:$PWD/lb:$dev"
        assert_rc "$d, -S 512: the source's bytes" 0 cmp -n $((8 * MiB + 512)) s512.raw "$dev"
        if [ "$cache" = none ]; then
            # only the request that ends at the source's unaligned end
            line=$($RECLOG lb "$ss")
            _checks=$((_checks + 1))
            [ "$(field "$line" unaligned)" -le 1 ] || _fail "$d, -S 512: unaligned zero requests: $line"
            assert_eq "$d, -S 512: nothing both zeroed and written" 0 "$(field "$line" overlap_bytes)"
        fi
        # qcow2 on the device, then the device as a qcow2 source
        d="qcow2 on ${ss}-byte sectors, -t $cache"
        fill "$dev"
        assert_rc "$d: convert" 0 "$QIMG" convert -t "$cache" -f raw -O qcow2 src.raw "$dev"
        assert_rc "$d: check" 0 "$QEMU_IMG" check "$dev"
        assert_rc "$d: contents" 0 "$QEMU_IMG" compare -f raw -F qcow2 src.raw "$dev"
        rm -f back.raw
        assert_rc "$d: as a source (-T $cache)" 0 \
            "$QIMG" convert -T "$cache" -f qcow2 -O raw "$dev" back.raw
        assert_rc "$d: as a source: the bytes" 0 cmp src.raw back.raw
        # -n over the first qcow2: the rest of it (from src.raw) stays
        assert_rc "$d: -n again" 0 "$QIMG" convert -n -t "$cache" -f raw -O qcow2 s512.raw "$dev"
        assert_rc "$d: -n: check" 0 "$QEMU_IMG" check "$dev"
        rm -f back.raw
        "$QEMU_IMG" convert -f qcow2 -O raw "$dev" back.raw
        assert_rc "$d: -n: contents" 0 cmp -n $((8 * MiB + 512)) s512.raw back.raw
    done
done

# A full disk (a 16 MiB tmpfs, 40 MiB of data, 16 requests in flight):
# the first error with its offset, exit 1, no hang, the qcow2 consistent.
head -c $((40 * MiB)) /dev/urandom >r40.raw
mkdir small
if mount -t tmpfs -o size=16m tmpfs small; then
    for fmt in raw qcow2; do
        timeout -k 5 60 "$QIMG" convert -m 16 -f raw -O $fmt r40.raw small/t.$fmt >e.out 2>e.err
        assert_eq "ENOSPC ($fmt): exit code" 1 "$?"
        _checks=$((_checks + 1))
        # qemu-img's line first; qimg's detail, if any, on a second
        head -n 1 e.err | grep -q "^qimg: error while writing at byte [0-9]*: No space left on device$" ||
            _fail "ENOSPC ($fmt): message: $(cat e.err)"
        assert_eq "ENOSPC ($fmt): one message" 1 "$(grep -c "^qimg:" e.err)"
        if [ $fmt = qcow2 ]; then
            "$QEMU_IMG" check small/t.qcow2 >c.out 2>&1
            rc=$?
            _checks=$((_checks + 1))
            [ "$rc" = 0 ] || [ "$rc" = 3 ] || { _fail "ENOSPC: check rc $rc"; cat c.out; }
        fi
        rm -f small/t.$fmt
    done
    umount small
else
    _fail "cannot mount a tmpfs as root"
fi

# A device smaller than the source is refused, as qemu-img refuses it.
truncate -s 40M src-big.raw
truncate -s 50M src-big.raw
expect_error "convert onto a smaller device" convert -n -f raw -O raw src-big.raw "$dev512"

finish
