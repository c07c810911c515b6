#!/bin/bash
# qimg compare (and compare -s) on qcow2/qcow2 and qcow2/raw pairs: equal
# contents stored differently (cluster sizes, compression, backing chains,
# zero clusters, data files), differences at varied offsets (in data, in
# holes, in zero clusters, in the backing file), size mismatches.  Messages
# (mismatch offsets included) and exit codes must equal qemu-img compare's,
# and with -q (over every 4th pair in make test, every pair with
# QIMG_LONG=1) the exit codes and the silence.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

MiB=$((1024 * 1024))
SIZE=$((6 * MiB))

head -c $((2 * MiB)) /dev/urandom >rand.bin
yes 'compare me 0123456789' | head -c $((2 * MiB)) >text.bin

# The reference contents: a raw file with data, holes and written zeros.
truncate -s $SIZE ref.raw
dd if=rand.bin of=ref.raw bs=4k seek=1 count=40 conv=notrunc status=none
dd if=text.bin of=ref.raw bs=64k seek=20 count=10 conv=notrunc status=none
dd if=/dev/zero of=ref.raw bs=64k seek=40 count=4 conv=notrunc status=none
dd if=rand.bin of=ref.raw bs=1 seek=$((5 * MiB + 1000)) count=3000 conv=notrunc status=none

# The same contents stored in many ways.
qi convert -O qcow2 ref.raw same.qcow2
qi convert -O qcow2 -o cluster_size=512,compat=0.10 ref.raw same-512.qcow2
qi convert -O qcow2 -o cluster_size=2M ref.raw same-2m.qcow2
qi convert -c -O qcow2 -o compression_type=zstd ref.raw same-zstd.qcow2
qi convert -c -O qcow2 ref.raw same-zlib.qcow2
qi convert -S 0 -O qcow2 ref.raw same-full.qcow2
qi convert -O qcow2 -o extended_l2=on ref.raw same-xl2.qcow2
qi convert -O qcow2 -o data_file=same-df.data ref.raw same-df.qcow2
qi convert -O qcow2 -o preallocation=metadata ref.raw same-pre.qcow2
# Over a backing file: the top holds part of the data.
qi create -f qcow2 -o cluster_size=4k half-base.qcow2 $SIZE
qio half-base.qcow2 "write -q -s rand.bin 0 $((3 * MiB))"
qi create -f qcow2 -b half-base.qcow2 -F qcow2 same-chain.qcow2
qi convert -n -O qcow2 ref.raw same-chain.qcow2
qi create -f qcow2 -b ref.raw -F raw same-over-raw.qcow2
# Zeros as zero clusters over a backing file that has data there.
qi create -f qcow2 -b ref.raw -F raw zeroed.qcow2
qio zeroed.qcow2 "write -q -z 0 $SIZE"
truncate -s $SIZE zeros.raw

same_imgs="same.qcow2 same-512.qcow2 same-2m.qcow2 same-zstd.qcow2 same-zlib.qcow2
    same-full.qcow2 same-xl2.qcow2 same-df.qcow2 same-pre.qcow2 same-chain.qcow2
    same-over-raw.qcow2"

# Differences: one byte (or a small write) at varied offsets, in data, in
# holes, in written zeros, in the tail; made with qemu-io on top of same.qcow2.
n=0
diffs=
for spec in "0 1" "4096 1" "4097 1" "100000 1" "$((20 * 65536 - 1)) 2" \
    "$((40 * 65536 + 300)) 1" "$((3 * MiB)) 512" "$((5 * MiB + 3999)) 1" \
    "$((SIZE - 1)) 1" "$((SIZE - 65536)) 65536"; do
    n=$((n + 1))
    cp same.qcow2 diff$n.qcow2
    qio diff$n.qcow2 "write -q -P 0x5a $spec"
    diffs="$diffs diff$n.qcow2"
done
# A difference that exists only in the backing file of the top.
qi create -f qcow2 -b half-base.qcow2 -F qcow2 diffback.qcow2
qio diffback.qcow2 "write -q -P 0 0 4k"
qi convert -n -O qcow2 ref.raw diffback.qcow2
qio half-base.qcow2 "write -q -P 0x11 $((2 * MiB)) 4k"
# (same-chain.qcow2 reads the same base; its top covers that range only
# where ref.raw has data, so it changes as well: rebuild it from scratch.)
rm -f same-chain.qcow2
qi create -f qcow2 -o cluster_size=4k base2.qcow2 $SIZE
qio base2.qcow2 "write -q -s rand.bin 0 $((3 * MiB))"
qi create -f qcow2 -b base2.qcow2 -F qcow2 same-chain.qcow2
qi convert -n -O qcow2 ref.raw same-chain.qcow2

# Size mismatches: longer with an unallocated tail, a zero-cluster tail,
# data in the tail; shorter; grown over a shorter base.
qi convert -O qcow2 ref.raw long-hole.qcow2
qi resize long-hole.qcow2 +3M
cp long-hole.qcow2 long-zero.qcow2
qio long-zero.qcow2 "write -q -z $SIZE 3M"
cp long-hole.qcow2 long-written-zero.qcow2
qio long-written-zero.qcow2 "write -q -P 0 $SIZE 1M"
cp long-hole.qcow2 long-data.qcow2
qio long-data.qcow2 "write -q -P 1 $((SIZE + 2 * MiB + 17)) 1"
qi convert -O qcow2 ref.raw short.qcow2
qi resize --shrink short.qcow2 $((3 * MiB + 512))
qi create -f qcow2 -b ref.raw -F raw grown.qcow2 $((SIZE + MiB))
cp ref.raw long.raw
truncate -s $((SIZE + 3 * MiB)) long.raw

pairs=()
for a in $same_imgs; do
    pairs+=("ref.raw $a" "$a ref.raw" "same.qcow2 $a")
done
for d in $diffs diffback.qcow2; do
    pairs+=("ref.raw $d" "$d ref.raw" "same-512.qcow2 $d" "$d same-zstd.qcow2")
done
pairs+=("zeroed.qcow2 zeros.raw" "zeros.raw zeroed.qcow2" "zeroed.qcow2 ref.raw"
    "same.qcow2 long-hole.qcow2" "long-hole.qcow2 same.qcow2" "ref.raw long-zero.qcow2"
    "long-zero.qcow2 ref.raw" "same.qcow2 long-written-zero.qcow2"
    "long-written-zero.qcow2 same.qcow2" "same.qcow2 long-data.qcow2"
    "long-data.qcow2 same.qcow2" "long.raw long-data.qcow2" "long-hole.qcow2 long.raw"
    "same.qcow2 short.qcow2" "short.qcow2 same.qcow2" "short.qcow2 ref.raw"
    "ref.raw grown.qcow2" "grown.qcow2 ref.raw" "grown.qcow2 long.raw"
    "diff1.qcow2 diff1.qcow2")

# (-q over every 4th pair, identical, different and of other sizes among
# them; QIMG_LONG=1: over every pair)
i=0
for p in "${pairs[@]}"; do
    # shellcheck disable=SC2086
    same_as_qemu_err compare $p
    i=$((i + 1))
    [ $((i % 4)) = 1 ] || [ -n "${QIMG_LONG:-}" ] || continue
    # shellcheck disable=SC2086
    same_as_qemu_err compare -q $p
done

# Strict mode: allocation differences count (block status), and so does a
# size mismatch.  (qemu-img compares the whole status word of
# bdrv_block_status_above, BDRV_BLOCK_EOF included: same.qcow2 against
# same-full.qcow2 mismatches at offset 0, where only EOF differs.)
for p in "same.qcow2 same.qcow2" "ref.raw same.qcow2" "same.qcow2 ref.raw" \
    "same.qcow2 same-full.qcow2" "same.qcow2 same-512.qcow2" "same.qcow2 same-zstd.qcow2" \
    "same.qcow2 same-chain.qcow2" "same.qcow2 same-pre.qcow2" "same.qcow2 same-xl2.qcow2" \
    "zeroed.qcow2 zeros.raw" "same.qcow2 long-hole.qcow2" "same.qcow2 diff3.qcow2" \
    "same.qcow2 short.qcow2" "ref.raw grown.qcow2"; do
    # shellcheck disable=SC2086
    same_as_qemu_err compare -s $p
    i=$((i + 1))
    [ $((i % 4)) = 1 ] || [ -n "${QIMG_LONG:-}" ] || continue
    # shellcheck disable=SC2086
    same_as_qemu_err compare -s -q $p
done

# Explicit formats, cache modes, -U, progress with -q.
same_as_qemu_err compare -f qcow2 -F raw same.qcow2 ref.raw
same_as_qemu_err compare -f raw -F qcow2 ref.raw diff3.qcow2
same_as_qemu_err compare -f qcow2 -F qcow2 -T writeback -U same.qcow2 same-2m.qcow2
same_as_qemu compare -p -q same.qcow2 diff5.qcow2
# Comparing a qcow2 image as raw sees its metadata: different.
same_as_qemu_err compare -f raw -F raw same.qcow2 same-512.qcow2

# Errors: exit 2 when an image cannot be opened or has the wrong format.
expect_error "qcow2 format on a raw file" compare -f qcow2 ref.raw same.qcow2
expect_error "qcow2 format on a raw file (second)" compare -F qcow2 same.qcow2 ref.raw
qi create -f qcow2 -b nowhere.qcow2 -F qcow2 -u broken-chain.qcow2 1M
expect_error "missing backing file" compare broken-chain.qcow2 ref.raw
assert_rc "missing backing file: exit code" 2 "$QIMG" compare broken-chain.qcow2 ref.raw
# A file with the qcow2 magic and version but a short header is probed as
# qcow2 (magic and version are all qemu's probe reads), then fails to open.
head -c 50 same.qcow2 >truncated.qcow2
expect_error "truncated qcow2 header" compare truncated.qcow2 ref.raw
expect_error "qcow2 format on a raw file (first)" compare -f qcow2 ref.raw same.qcow2

finish
