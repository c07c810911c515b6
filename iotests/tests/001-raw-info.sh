#!/bin/bash
# qimg info on raw files equals qemu-img info, JSON and human, byte for byte.
. "${0%/*}/../common.sh"
requires qimg qemu-img

# Sparse file with holes and data at various offsets.
truncate -s 10M holes.raw
dd if=/dev/urandom of=holes.raw bs=4k seek=1 count=3 conv=notrunc status=none
dd if=/dev/urandom of=holes.raw bs=1M seek=5 count=1 conv=notrunc status=none
printf 'tail' | dd of=holes.raw bs=1 seek=$((10 * 1024 * 1024 - 4)) conv=notrunc status=none
# Empty file.
: >empty.raw
# Sizes that are not a multiple of 512.
head -c 1000 /dev/urandom >odd.raw
truncate -s 5000 oddhole.raw
printf 'abc' | dd of=oddhole.raw bs=1 seek=4100 conv=notrunc status=none
# Fully allocated, and big sparse sizes for the human units.
dd if=/dev/zero of=full.raw bs=64k count=16 status=none
truncate -s 1536M big.raw
truncate -s 3T huge.raw
truncate -s 1000 k1000.raw
truncate -s 1023590 k999.raw
# A name that needs JSON escaping.
truncate -s 1M 'we"ird\name é.raw'

for f in holes.raw empty.raw odd.raw oddhole.raw full.raw big.raw huge.raw \
    k1000.raw k999.raw 'we"ird\name é.raw'; do
    same_as_qemu info --output=json "$f"
    same_as_qemu info "$f"
    same_as_qemu info --output=human -f raw "$f"
    same_as_qemu info -U --output=json -f raw "$f"
    same_as_qemu info --backing-chain --output=json "$f"
    same_as_qemu info --backing-chain "$f"
done

# Errors: same exit codes and a qimg: message.
expect_error "missing file" info nonexistent.raw
expect_error "missing file (json)" info --output=json nonexistent.raw
same_as_qemu_err info --output=xml holes.raw
same_as_qemu_err info
same_as_qemu_err info holes.raw empty.raw
same_as_qemu_err info --frobnicate holes.raw
same_as_qemu_err info -f

finish
