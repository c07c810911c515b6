#!/usr/bin/env bash
# `make run`: a short demo of qimg's main jobs on data it generates.
set -euo pipefail
cd "$(dirname "$0")/.."
QIMG=${QIMG:-$PWD/build/tools/qimg}
dir=$(mktemp -d "${TMPDIR:-/tmp}/qimg-demo.XXXXXX")
trap 'rm -rf "$dir"' EXIT
step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }

echo "qimg demo in $dir"
# A 64 MiB raw disk with some data and holes.
truncate -s 64M "$dir/disk.raw"
head -c 4M /dev/urandom | dd of="$dir/disk.raw" bs=1M seek=8 conv=notrunc status=none
printf 'hello qimg' | dd of="$dir/disk.raw" bs=1 seek=40000000 conv=notrunc status=none

step "$QIMG" info "$dir/disk.raw"
step "$QIMG" map --output=json "$dir/disk.raw"
if "$QIMG" convert -O qcow2 "$dir/disk.raw" "$dir/disk.qcow2" 2>/dev/null; then
    step "$QIMG" info "$dir/disk.qcow2"
    step "$QIMG" map "$dir/disk.qcow2"
    step "$QIMG" compare "$dir/disk.raw" "$dir/disk.qcow2"
    command -v qemu-img >/dev/null && step qemu-img check "$dir/disk.qcow2"
else
    step "$QIMG" convert -O raw "$dir/disk.raw" "$dir/copy.raw"
    step "$QIMG" compare "$dir/disk.raw" "$dir/copy.raw"
fi
if command -v qemu-img >/dev/null; then
    qemu-img create -q -f qcow2 "$dir/snap.qcow2" 32M
    qemu-io -c 'write -P 0xab 0 1M' "$dir/snap.qcow2" >/dev/null
    qemu-img snapshot -c before "$dir/snap.qcow2"
    qemu-io -c 'write -P 0xcd 0 1M' "$dir/snap.qcow2" >/dev/null
    step "$QIMG" snapshot -l "$dir/snap.qcow2"
    step "$QIMG" convert -l before -O raw "$dir/snap.qcow2" "$dir/before.raw"
    step "$QIMG" info --output=json "$dir/snap.qcow2"
fi
PLUGIN=${QIMG_NBD_PLUGIN:-$(dirname "$QIMG")/../nbd/nbdkit-qimg-plugin.so}
if [ -e "$PLUGIN" ] && [ -e "$dir/disk.qcow2" ] && command -v nbdcopy >/dev/null; then
    # Serve the qcow2 over NBD (nbdkit with the qimg plugin), copy it back.
    step nbdkit -U - "$PLUGIN" file="$dir/disk.qcow2" readonly=true \
        --run "nbdinfo --map \$uri && nbdcopy \$uri $dir/back.raw"
    step "$QIMG" compare -f raw -F raw "$dir/disk.raw" "$dir/back.raw"
fi
echo
echo "demo done"
