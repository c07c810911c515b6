#!/bin/bash
# Human qimg info (plain and --backing-chain) and qimg snapshot -l equal
# qemu-img's byte for byte, for qcow2 images with snapshots, backing files,
# data files (info opening none of them) and the various header options.  Nothing is filtered (both
# tools run with TZ=UTC, so the dates agree).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3

MiB=$((1024 * 1024))

# patch_snapshots IMG: give the snapshots of IMG (made by qemu-img, so with
# zero VM state and clock) VM state sizes, VM clocks, icounts and dates
# that exercise the column formatting.  Only fixed-size fields change.
patch_snapshots() {
    python3 - "$1" <<'PY' || exit 1
import struct, sys
vals = [  # (date_sec, date_nsec, vm_clock_nsec, vm_state_size, icount)
    (0, 0, 0, 0, 0),
    (1700000000, 999999999, 1234567891, 1536, 7),
    (2000000000, 5, (((26 * 60) + 3) * 60 + 4) * 10**9 + 567 * 10**6, 5 * 1024**3 + 123, 123456789012),
    (86399, 0, 100 * 3600 * 10**9 + 999 * 10**6, 1024 * 1024, 2**63 - 1),
    (1234567890, 0, 999, 1023, 0),
]
with open(sys.argv[1], 'r+b') as f:
    hdr = f.read(72)
    version = struct.unpack('>I', hdr[4:8])[0]
    nb, off = struct.unpack('>IQ', hdr[60:72])
    for i in range(nb):
        f.seek(off)
        e = f.read(40)
        id_len, name_len = struct.unpack('>HH', e[12:16])
        extra = struct.unpack('>I', e[36:40])[0]
        d, dn, clk, vms, ic = vals[i % len(vals)]
        f.seek(off + 16)
        f.write(struct.pack('>IIQI', d, dn, clk, min(vms, 0xffffffff)))
        if extra >= 8:
            f.seek(off + 40)
            f.write(struct.pack('>Q', vms))
        if extra >= 24:
            f.seek(off + 56)
            f.write(struct.pack('>Q', ic))
        off += (40 + extra + id_len + name_len + 7) & ~7
PY
}

# set_incompat IMG BIT: set an incompatible feature bit (0 dirty, 1 corrupt).
set_incompat() {
    python3 - "$1" "$2" <<'PY' || exit 1
import struct, sys
with open(sys.argv[1], 'r+b') as f:
    f.seek(72)
    v = struct.unpack('>Q', f.read(8))[0] | (1 << int(sys.argv[2]))
    f.seek(72)
    f.write(struct.pack('>Q', v))
PY
}

check_human() {
    local img=$1
    same_as_qemu_err info "$img"
    same_as_qemu_err info --backing-chain "$img"
    same_as_qemu_err info -U --output=human -f qcow2 "$img"
    same_as_qemu_err snapshot -l "$img"
    same_as_qemu_err snapshot -l -U "$img"
    same_as_qemu_err snapshot -q -l "$img"
}

# Plain images: no snapshots, v2 and v3, the header options.
qi create -f qcow2 plain.qcow2 1G
qi create -f qcow2 -o compat=0.10 v2.qcow2 1536M
qi create -f qcow2 -o compat=0.10,cluster_size=512 v2-512.qcow2 $((3 * MiB + 512))
qi create -f qcow2 -o lazy_refcounts=on,refcount_bits=64,cluster_size=2M lazy.qcow2 3T
qi create -f qcow2 -o extended_l2=on,compression_type=zstd,refcount_bits=1 xl2.qcow2 1000000
qi create -f qcow2 -o preallocation=metadata pre.qcow2 5M
qi create -f qcow2 empty.qcow2 0
qio plain.qcow2 "write -q -P 1 0 3M" "write -q -P 2 $((1024 * MiB - 65536)) 64k"
for img in plain.qcow2 v2.qcow2 v2-512.qcow2 lazy.qcow2 xl2.qcow2 pre.qcow2 empty.qcow2; do
    check_human "$img"
done

# Snapshots: several, names of every length, a deleted one, after a resize.
qi create -f qcow2 snaps.qcow2 64M
qio snaps.qcow2 "write -q -P 1 0 1M"
for name in a 'two words' 'a-name-of-exactly-twenty' 'a much longer snapshot name that overflows its column' 5; do
    qi snapshot -c "$name" snaps.qcow2
    qio snaps.qcow2 "write -q -P 2 1M 64k"
done
qi snapshot -d 'two words' snaps.qcow2
qi resize snaps.qcow2 100M
qi snapshot -c after-resize snaps.qcow2
check_human snaps.qcow2
cp snaps.qcow2 snaps-patched.qcow2
patch_snapshots snaps-patched.qcow2
check_human snaps-patched.qcow2
same_as_qemu info --output=json snaps-patched.qcow2
# Snapshots in a v2 image (no extra data: no icount, no disk size).
qi create -f qcow2 -o compat=0.10 snaps-v2.qcow2 10M
qi snapshot -c one snaps-v2.qcow2
qi snapshot -c two snaps-v2.qcow2
patch_snapshots snaps-v2.qcow2
check_human snaps-v2.qcow2

# Backing files: qcow2 and raw bases, chains of 2 and 3, a relative path
# in a subfolder, a missing backing file, snapshots on top.
truncate -s 10M base.raw
qi create -f qcow2 -b base.raw -F raw over-raw.qcow2
qi create -f qcow2 -o cluster_size=4k base.qcow2 20M
qi create -f qcow2 -b base.qcow2 -F qcow2 mid.qcow2
qi create -f qcow2 -b mid.qcow2 -F qcow2 top.qcow2 30M
qi snapshot -c on-top top.qcow2
mkdir sub
qi create -f qcow2 sub/inner.qcow2 4M
qi create -f qcow2 -b inner.qcow2 -F qcow2 sub/outer.qcow2
qi create -f qcow2 -b sub/outer.qcow2 -F qcow2 outer2.qcow2
qi create -f qcow2 -b gone.qcow2 -F qcow2 -u missing.qcow2 1M
for img in over-raw.qcow2 mid.qcow2 top.qcow2 sub/outer.qcow2 outer2.qcow2; do
    check_human "$img"
done
# A missing backing file: info without the chain works; both fail the chain.
same_as_qemu_err info missing.qcow2
same_as_qemu info --backing-chain missing.qcow2

# External data files, raw or not, with snapshots not allowed but backing
# allowed for the non-raw kind.
qi create -f qcow2 -o data_file=d1.data df.qcow2 8M
qi create -f qcow2 -o data_file=d2.data,data_file_raw=on dfraw.qcow2 8M
qi create -f qcow2 -o data_file=d3.data -b base.qcow2 -F qcow2 dfb.qcow2
qio df.qcow2 "write -q -P 3 0 1M"
for img in df.qcow2 dfraw.qcow2 dfb.qcow2; do
    check_human "$img"
done
# info opens no data file, the header's or an option's (qcow2.c invariant
# 11; CVE-2024-4467, whose fix Debian's qemu-img 7.2 carries): with the
# data files gone, info (and its JSON, and --backing-chain) is still
# qemu-img's; a command that reads data still fails, naming the file.
mv d1.data d1.gone && mv d2.data d2.gone
for img in df.qcow2 dfraw.qcow2; do
    same_as_qemu_err info "$img"
    same_as_qemu info --output=json --backing-chain "$img"
done
same_as_qemu_err info --image-opts driver=qcow2,file.filename=df.qcow2,data-file.filename=/nonexistent
same_as_qemu_err map --output=json df.qcow2
mv d1.gone d1.data && mv d2.gone d2.data

# Dirty (lazy refcounts, not cleanly shut down) and corrupt images.
qi create -f qcow2 -o lazy_refcounts=on dirty.qcow2 1M
set_incompat dirty.qcow2 0
qi create -f qcow2 corrupt.qcow2 1M
set_incompat corrupt.qcow2 1
for img in dirty.qcow2 corrupt.qcow2; do
    same_as_qemu_err info -U "$img"
    same_as_qemu info -U --output=json "$img"
    same_as_qemu_err snapshot -l -U "$img"
done

# Names that need care in the human output.
qi create -f qcow2 'sp ace "q".qcow2' 1M
qi snapshot -c 'tab	and "quote"' 'sp ace "q".qcow2'
check_human 'sp ace "q".qcow2'

# Errors.
expect_error "snapshot -l of a missing file" snapshot -l nonexistent.qcow2
same_as_qemu_err snapshot
same_as_qemu_err snapshot -l
same_as_qemu_err snapshot -l snaps.qcow2 plain.qcow2
# qemu-img 7.2's snapshot command has no -f option.
same_as_qemu_err snapshot -l -f qcow2 snaps.qcow2
same_as_qemu_err snapshot -l -f raw base.raw
same_as_qemu_err snapshot -l base.raw

finish
