#!/bin/bash
# qimg map on raw files equals qemu-img map, JSON and human, including
# --start-offset and --max-length.
. "${0%/*}/../common.sh"
requires qimg qemu-img

truncate -s 10M holes.raw
dd if=/dev/urandom of=holes.raw bs=4k seek=1 count=3 conv=notrunc status=none
dd if=/dev/urandom of=holes.raw bs=1M seek=5 count=1 conv=notrunc status=none
dd if=/dev/urandom of=holes.raw bs=64k seek=100 count=3 conv=notrunc status=none
# Data at offset 0 (human output prints "0", not "0x0").
truncate -s 3M head.raw
dd if=/dev/urandom of=head.raw bs=64k count=2 conv=notrunc status=none
: >empty.raw
head -c 1000 /dev/urandom >odd.raw
truncate -s 5000 oddhole.raw
printf 'abc' | dd of=oddhole.raw bs=1 seek=4100 conv=notrunc status=none
dd if=/dev/urandom of=full.raw bs=64k count=16 status=none
truncate -s 2G sparse.raw
dd if=/dev/urandom of=sparse.raw bs=1M seek=1023 count=2 conv=notrunc status=none

for f in holes.raw head.raw empty.raw odd.raw oddhole.raw full.raw sparse.raw; do
    same_as_qemu map --output=json "$f"
    same_as_qemu map "$f"
    same_as_qemu map --output=human -f raw "$f"
done

for range in "--start-offset=0" "--start-offset=1k" "--start-offset=6000" \
    "--start-offset=5M" "--start-offset=10M" "--start-offset=20M" \
    "--max-length=0" "--max-length=1536" "--max-length=4096" \
    "--start-offset=6000 --max-length=3000000" \
    "--start-offset=6000 --max-length=300" \
    "--start-offset=5242880 --max-length=1048576" \
    "--start-offset=1 --max-length=9223372036854775806" \
    "--max-length=8E"; do
    # shellcheck disable=SC2086
    same_as_qemu map --output=json $range holes.raw
    # shellcheck disable=SC2086
    same_as_qemu map $range holes.raw
done

same_as_qemu_err map --start-offset=abc holes.raw
same_as_qemu_err map --start-offset=-1 holes.raw
same_as_qemu_err map --max-length=1X holes.raw
same_as_qemu_err map --output=foo holes.raw
same_as_qemu_err map holes.raw empty.raw
expect_error "missing file" map nonexistent.raw

finish
