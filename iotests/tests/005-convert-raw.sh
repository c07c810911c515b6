#!/bin/bash
# qimg convert raw -> raw: the copy is identical (qemu-img compare) and its
# allocation map equals that of qemu-img convert's output, for the default
# and other -S values, with a new and with an existing target.  make test
# converts the empty source and the one without zeros (dense) with three -S
# values, the others with all nine; QIMG_LONG=1 all four with all nine.
. "${0%/*}/../common.sh"
requires qimg qemu-img python3

# A source with holes, data with short and long zero runs inside, explicit
# zeros, unaligned data and data at the very end.
python3 - <<'PY'
import random
random.seed(20240611)
size = 12 * 1024 * 1024
with open('src.raw', 'wb') as f:
    f.truncate(size)
    def w(off, data):
        f.seek(off)
        f.write(data)
    w(0, b'\x01' * 512)
    w(4096 + 512, b'\x02' * 100)
    blk = bytearray(b'\x03' * (3 * 1024 * 1024))
    for z in [512, 1024, 3584, 4096, 8192, 4608, 16384, 65536, 1536, 2560]:
        o = random.randrange(0, len(blk) - z)
        blk[o:o + z] = b'\0' * z
    w(1024 * 1024 + 1536, bytes(blk))
    w(6 * 1024 * 1024 - 700, b'\x04' * 1400)
    w(8 * 1024 * 1024, b'\0' * (1024 * 1024))
    w(10 * 1024 * 1024 + 7 * 512, b'\x05' * 512)
    w(size - 512, b'\x06' * 512)
PY
truncate -s 3M holes.raw
dd if=/dev/urandom of=holes.raw bs=64k seek=3 count=2 conv=notrunc status=none
: >empty.raw
dd if=/dev/urandom of=dense.raw bs=1M count=5 status=none

# check_convert SRC ARGS...: convert SRC with both tools, then compare.
check_convert() {
    local src=$1 desc
    shift
    desc="convert $* $src"
    rm -f q.raw m.raw
    "$QEMU_IMG" convert "$@" "$src" q.raw >/dev/null 2>&1
    "$QIMG" convert "$@" "$src" m.raw >.m.out 2>&1
    M_RC=$?
    assert_eq "$desc: exit code" 0 "$M_RC" || { cat .m.out; return 1; }
    assert_eq "$desc: output" "" "$(cat .m.out)"
    assert_rc "$desc: compare with the source" 0 "$QEMU_IMG" compare -f raw -F raw "$src" m.raw
    assert_eq "$desc: map" "$("$QEMU_IMG" map --output=json q.raw)" \
        "$("$QEMU_IMG" map --output=json m.raw)"
    # actual-size is st_blocks: an ext4 extent-index block (4 KiB) comes and
    # goes with how fragmented the allocation happened to be, so the sizes
    # may differ by metadata blocks, not by data (the map says that)
    assert_eq "$desc: info" \
        "$("$QEMU_IMG" info --output=json q.raw | grep -v 'filename\|actual-size')" \
        "$("$QEMU_IMG" info --output=json m.raw | grep -v 'filename\|actual-size')"
    local qa ma
    qa=$(stat -c %b q.raw)
    ma=$(stat -c %b m.raw)
    assert_rc "$desc: allocated size ($((qa * 512)) vs $((ma * 512)))" 0 \
        test $((ma - qa)) -le 16 -a $((qa - ma)) -le 16
}

for src in src.raw holes.raw empty.raw dense.raw; do
    s_values=("" "-S 0" "-S 512" "-S 1k" "-S 3k" "-S 4k" "-S 8k" "-S 64k" "-S 16M")
    case "$src/${QIMG_LONG:-}" in
    empty.raw/ | dense.raw/) s_values=("" "-S 0" "-S 4k") ;;
    esac
    for s in "${s_values[@]}"; do
        # shellcheck disable=SC2086
        check_convert "$src" $s
    done
    check_convert "$src" -O raw -f raw -t writeback -T none
    check_convert "$src" -p -q
    check_convert "$src" -o preallocation=full
done

# Existing target (-n): old contents are overwritten, zeros included.
for s in "" "-S 0" "-S 3k"; do
    head -c 13M /dev/urandom >q.raw
    cp q.raw m.raw
    # shellcheck disable=SC2086
    "$QEMU_IMG" convert -n $s src.raw q.raw
    # shellcheck disable=SC2086
    assert_rc "convert -n $s" 0 "$QIMG" convert -n $s src.raw m.raw
    assert_rc "convert -n $s: contents" 0 "$QEMU_IMG" compare q.raw m.raw
    assert_eq "convert -n $s: map" "$("$QEMU_IMG" map --output=json q.raw)" \
        "$("$QEMU_IMG" map --output=json m.raw)"
done

# Errors.
truncate -s 1M small.raw
same_as_qemu_err convert -n src.raw small.raw
same_as_qemu_err convert -n -o preallocation=off src.raw out.raw
for s in 1000 32M 1k5 -1 abc 16M1; do
    same_as_qemu_err convert -S "$s" src.raw out.raw
done
same_as_qemu_err convert src.raw
same_as_qemu_err convert
same_as_qemu_err convert -t foo src.raw out.raw
same_as_qemu_err convert -T bar src.raw out.raw
same_as_qemu_err convert -O raw -o foo=1 src.raw out.raw
same_as_qemu_err convert -O raw -o help src.raw out.raw
same_as_qemu_err convert -O raw -o help
same_as_qemu_err convert -m 20 src.raw out.raw
same_as_qemu_err convert -x src.raw out.raw
same_as_qemu_err convert -O foo src.raw out.raw
expect_error "missing source" convert nonexistent.raw out.raw
expect_error "missing target folder" convert src.raw nodir/out.raw
expect_error "missing -n target" convert -n src.raw nonexistent.raw
rm -f out.raw

finish
