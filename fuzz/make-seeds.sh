#!/bin/sh
# Regenerate fuzz/seeds/: small qcow2 images made by qemu-img covering the
# features the driver parses.  Usage: fuzz/make-seeds.sh [outdir]
set -eu
out=${1:-$(dirname "$0")/seeds}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out"
rm -f "$out"/*.qcow2

img() { # name create-options size [qemu-io commands...]
    name=$1; opts=$2; size=$3; shift 3
    qemu-img create -q -f qcow2 -o "$opts" "$tmp/$name.qcow2" "$size"
    for c in "$@"; do
        qemu-io -f qcow2 -c "$c" "$tmp/$name.qcow2" >/dev/null
    done
}

img v3-512 cluster_size=512 64k 'write -P 1 0 1k' 'write -z 4k 1k' 'write -P 2 30k 600'
img v2-512 cluster_size=512,compat=0.10 64k 'write -P 3 0 2k' 'discard 1k 512'
img v3-4k cluster_size=4096 256k 'write -P 4 5000 9000' 'write -z 64k 8k'
img rc1 cluster_size=512,refcount_bits=1 32k 'write -P 5 0 1k'
img rc64 cluster_size=512,refcount_bits=64 32k 'write -P 6 0 1k'
img lazy cluster_size=512,lazy_refcounts=on 32k 'write -P 7 0 512'
img xl2 cluster_size=16384,extended_l2=on 64k 'write -P 8 1k 2k' 'write -z 8k 1k'
qemu-img create -q -f qcow2 -o cluster_size=512 "$tmp/base.qcow2" 32k
img backing cluster_size=512,backing_file=base.qcow2,backing_fmt=qcow2 32k 'write -P 9 0 512'
img datafile cluster_size=512,data_file=data.raw 32k 'write -P 10 0 1k'
img snap cluster_size=512 32k 'write -P 11 0 1k'
qemu-img snapshot -c first "$tmp/snap.qcow2"
qemu-io -f qcow2 -c 'write -P 12 0 512' "$tmp/snap.qcow2" >/dev/null
img bitmap cluster_size=512 32k 'write -P 13 0 512'
qemu-img bitmap --add "$tmp/bitmap.qcow2" b0

# compressed clusters: compressible patterns, incompressible noise, zeros
head -c 12288 /dev/urandom > "$tmp/src.raw"
truncate -s 32k "$tmp/src.raw"
qemu-io -f raw -c 'write -P 0x61 0 4k' -c 'write -P 0x62 20k 3k' "$tmp/src.raw" >/dev/null
qemu-img convert -c -O qcow2 -o cluster_size=512 "$tmp/src.raw" "$tmp/zlib.qcow2"
qemu-img convert -c -O qcow2 -o cluster_size=512,compression_type=zstd \
    "$tmp/src.raw" "$tmp/zstd.qcow2"
qemu-img convert -c -O qcow2 -o cluster_size=4096,compression_type=zstd \
    "$tmp/src.raw" "$tmp/zstd-4k.qcow2"
qemu-img convert -c -O qcow2 -o cluster_size=16384,extended_l2=on \
    "$tmp/src.raw" "$tmp/zlib-xl2.qcow2"

rm -f "$tmp/base.qcow2"
cp "$tmp"/*.qcow2 "$out"/
ls -l "$out"
