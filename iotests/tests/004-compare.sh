#!/bin/bash
# qimg compare on raw files: same messages (mismatch offsets included) and
# exit codes as qemu-img compare.  make test runs each pair plainly and
# every third one also with -q and with -f/-F/-T/-U; QIMG_LONG=1 runs all
# three on every pair.
. "${0%/*}/../common.sh"
requires qimg qemu-img

MiB=$((1024 * 1024))

# poke FILE OFFSET BYTE: write one byte.
poke() {
    printf "$3" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

truncate -s 10M base.raw
dd if=/dev/urandom of=base.raw bs=4k seek=1 count=3 conv=notrunc status=none
dd if=/dev/urandom of=base.raw bs=1M seek=5 count=1 conv=notrunc status=none
cp base.raw same.raw

# Differences in data, in a hole, at unaligned offsets, at the ends.
n=0
for off in 0 100 511 512 4096 5000 16383 16384 1048576 5300000 $((5 * MiB)) \
    $((6 * MiB - 1)) $((6 * MiB)) $((10 * MiB - 1)); do
    n=$((n + 1))
    cp base.raw "diff$n.raw"
    poke "diff$n.raw" "$off" '\x5a'
done

# The same contents, fully allocated.
dd if=/dev/zero of=full.raw bs=1M count=10 status=none
dd if=base.raw of=full.raw conv=notrunc status=none

# Size mismatches: zero tail (hole or written zeros), non-zero tail, shorter.
cp base.raw longhole.raw
truncate -s 12M longhole.raw
cp base.raw longzero.raw
dd if=/dev/zero of=longzero.raw bs=1M seek=10 count=2 conv=notrunc status=none
cp longhole.raw longdata.raw
poke longdata.raw 11000000 '\x01'
cp longhole.raw longend.raw
poke longend.raw $((12 * MiB - 1)) '\x01'
cp base.raw short.raw
truncate -s 7M short.raw
truncate -s 5000 odd.raw
cp odd.raw odd2.raw
poke odd2.raw 4999 '\x01'

pairs=("base.raw same.raw" "base.raw full.raw" "full.raw base.raw")
for i in $(seq 1 $n); do
    pairs+=("base.raw diff$i.raw" "diff$i.raw base.raw" "full.raw diff$i.raw")
done
pairs+=("base.raw longhole.raw" "longhole.raw base.raw" "base.raw longzero.raw"
    "longzero.raw base.raw" "base.raw longdata.raw" "longdata.raw base.raw"
    "base.raw longend.raw" "base.raw short.raw" "short.raw base.raw"
    "odd.raw odd2.raw" "odd2.raw odd.raw" "odd.raw odd.raw")

# Every pair plain; quiet and with explicit formats / cache / -U on every
# third pair (QIMG_LONG=1: on every pair).
i=0
for p in "${pairs[@]}"; do
    # shellcheck disable=SC2086
    same_as_qemu_err compare $p
    i=$((i + 1))
    [ -z "${QIMG_LONG:-}" ] && [ $((i % 3)) != 1 ] && continue
    # shellcheck disable=SC2086
    same_as_qemu_err compare -q $p
    # shellcheck disable=SC2086
    same_as_qemu_err compare -f raw -F raw -T none -U $p
done

# Strict mode.
for p in "base.raw same.raw" "base.raw full.raw" "base.raw longhole.raw" \
    "base.raw diff3.raw" "full.raw full.raw"; do
    # shellcheck disable=SC2086
    same_as_qemu_err compare -s $p
done

# Progress output goes to stdout, and -q silences it.
same_as_qemu compare -p -q base.raw diff5.raw

# Errors: exit 2 when an image cannot be opened, 1 for usage errors.
expect_error "missing second image" compare base.raw nonexistent.raw
expect_error "missing first image" compare nonexistent.raw base.raw
assert_rc "missing image exit code" 2 "$QIMG" compare base.raw nonexistent.raw
same_as_qemu_err compare base.raw
same_as_qemu_err compare a b c
same_as_qemu_err compare -x base.raw same.raw
same_as_qemu_err compare -T foo base.raw same.raw
expect_error "wrong format" compare -f qcow2 base.raw same.raw

finish
