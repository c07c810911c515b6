#!/bin/sh
# Regenerate fuzz/seeds-ova/: small OVA archives (GNU tar in its ustar, pax
# and gnu formats, a long member name) holding an OVF written here and
# VMDKs: fuzz/seeds' small sparse and stream images, and a descriptor with
# flat extents that are members of the same archive.
# Usage: fuzz/make-ova-seeds.sh [outdir]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=$(realpath -m "${1:-$here/seeds-ova}")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out"
rm -f "$out"/*.ova
cd "$tmp"

cp "$here/seeds/vmdk-sparse.vmdk" sparse.vmdk
cp "$here/seeds/vmdk-stream.vmdk" stream.vmdk
long=a-disk-name-longer-than-the-hundred-bytes-a-ustar-name-field-holds-so-tar-writes-a-long-name.vmdk
cp sparse.vmdk "$long"
head -c 4096 /dev/urandom >ext-a.bin
head -c 2048 /dev/urandom >ext-b.bin
cat >desc.vmdk <<'D'
# Disk DescriptorFile
version=1
CID=abcdef01
parentCID=ffffffff
createType="monolithicFlat"
# Extent description
RW 8 FLAT "ext-a.bin" 0
RW 4 FLAT "ext-b.bin" 0
D

file() { echo "    <File ovf:href=\"$1\" ovf:id=\"$2\" ovf:size=\"$(stat -c %s "$1")\"${3:-}/>"; }
disk() { echo "    <Disk ovf:diskId=\"$1\" ovf:fileRef=\"$2\" ovf:capacity=\"$3\" ovf:capacityAllocationUnits=\"$4\" ovf:format=\"http://www.vmware.com/interfaces/specifications/vmdk.html#$5\"/>"; }
ovf() { # name, then the References lines, "--", the Disk lines
    name=$1; shift
    {
        echo '<?xml version="1.0" encoding="UTF-8"?>'
        echo '<Envelope xmlns="http://schemas.dmtf.org/ovf/envelope/1" xmlns:ovf="http://schemas.dmtf.org/ovf/envelope/1">'
        echo '  <References>'
        while [ "$1" != -- ]; do echo "$1"; shift; done
        shift
        echo '  </References>'
        echo '  <DiskSection><Info>Virtual disks</Info>'
        for l in "$@"; do echo "$l"; done
        echo '  </DiskSection>'
        echo '</Envelope>'
    } >"$name"
}

ovf one.ovf "$(file sparse.vmdk file1)" -- "$(disk vmdisk1 file1 128 'byte * 2^10' sparse)"
tar --format=ustar -cf "$out/one-ustar.ova" one.ovf sparse.vmdk

ovf desc.ovf "$(file desc.vmdk file1)" "$(file ext-a.bin f2)" "$(file ext-b.bin f3)" -- \
    "$(disk vmdisk1 file1 6144 byte monolithicFlat)" \
    '    <Disk ovf:diskId="blank" ovf:capacity="1" ovf:capacityAllocationUnits="MegaBytes"/>'
tar --format=ustar -cf "$out/desc-extents.ova" desc.ovf desc.vmdk ext-a.bin ext-b.bin

ovf two.ovf "$(file stream.vmdk file1 ' ovf:compression="identity"')" "$(file "$long" file2)" -- \
    "$(disk vmdisk1 file1 1 'byte * 2^20' streamOptimized)" \
    "$(disk vmdisk2 file2 128 'byte * 2^10' sparse)"
tar --format=pax -cf "$out/two-pax.ova" two.ovf stream.vmdk "$long"
tar --format=gnu -cf "$out/two-gnu.ova" two.ovf stream.vmdk "$long"
