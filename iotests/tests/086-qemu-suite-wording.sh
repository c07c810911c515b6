#!/bin/bash
# qemu-img's words where QEMU's own iotests read them (issue 29 item 4),
# each against qemu-img 7.2 on the same input:
#  - unknown incompatible features named from the image's feature-name
#    table, a last entry shorter than 48 bytes included (QEMU 036);
#  - "Image is too big" for a virtual size past the L1 limit (054).
. "$(dirname "$0")/../common.sh"
requires qimg qemu-img python3

# ---- feature-name table (036) ----
qi create -q -f qcow2 f.qcow2 64M
python3 - f.qcow2 <<'PY' # incompatible bits 61-63; a table naming 63 only, 14 bytes
import struct, sys
with open(sys.argv[1], "r+b") as f:
    d = bytearray(f.read(65536))
    v = struct.unpack(">Q", d[72:80])[0]
    d[72:80] = struct.pack(">Q", v | (7 << 61))
    hlen = struct.unpack(">I", d[100:104])[0]
    # drop the extensions, then: the feature table (one short entry), end
    ent = b"\x00\x3fTest feature"
    ext = struct.pack(">II", 0x6803F857, len(ent)) + ent
    ext += b"\0" * (-len(ext) % 8) + struct.pack(">II", 0, 0)
    d[hlen:hlen + len(ext) + 8] = ext + b"\0" * 8
    f.seek(0)
    f.write(d)
PY
same_as_qemu_err info f.qcow2
same_as_qemu_err check f.qcow2

# ---- Image is too big (054) ----
qi create -q -f qcow2 big.qcow2 1M
python3 - big.qcow2 <<'PY' # virtual size 2^60
import struct, sys
with open(sys.argv[1], "r+b") as f:
    f.seek(24)
    f.write(struct.pack(">Q", 1 << 60))
PY
same_as_qemu_err info big.qcow2
same_as_qemu_err check big.qcow2

finish
