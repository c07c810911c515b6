#!/usr/bin/env python3
"""Regenerate fuzz/seeds-{vpc,vdi,vhdx,qed}/: small images of every shape
the drivers parse, built field by field (iotests/hvimg.py) or by qemu-img
and cut short.  Usage: fuzz/make-hyperv-seeds.py [outdir-base]

VHDX seeds are packed as fuzz/fuzz-vhdx.c lays inputs out: the first
320 KiB, then the first 64 KiB of each following MiB.
"""
import os
import struct
import subprocess
import sys
import tempfile
import uuid

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "iotests"))
import hvimg  # noqa: E402
from hvimg import MIB  # noqa: E402

base = sys.argv[1] if len(sys.argv) > 1 else here
tmp = tempfile.mkdtemp()


def out(fmt, name, data):
    d = os.path.join(base, "seeds-" + fmt)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def read(path, limit=None):
    with open(path, "rb") as f:
        return f.read(limit) if limit else f.read()


def t(name):
    return os.path.join(tmp, name)


# VHD: dynamic with 4 KiB blocks, a differencing child, fixed, Hyper-V sized
u = hvimg.vhd_dynamic(t("p.vhd"), 64 * 1024, 4096, {0: (b"\x11" * 4096, None),
                                                   3: (b"\x22" * 100, None)})
out("vpc", "dynamic-4k.vhd", read(t("p.vhd")))
bm = bytearray(512)
bm[0] = 0xA0
hvimg.vhd_dynamic(t("c.vhd"), 64 * 1024, 4096, {1: (b"\x33" * 4096, bm)},
                  parent={"uuid": u, "name": "p.vhd", "w2ru": ".\\p.vhd", "w2ku": "C:\\p.vhd"})
out("vpc", "diff-4k.vhd", read(t("c.vhd")))
hvimg.vhd_fixed(t("f.vhd"), b"\x44" * 1536)
out("vpc", "fixed.vhd", read(t("f.vhd")))
hvimg.vhd_dynamic(t("w.vhd"), 40960, 512, {2: (b"\x55" * 512, None)}, creator=b"win ")
out("vpc", "hyperv-512.vhd", read(t("w.vhd")))

# VDI: qemu-img's dynamic and static, cut after their first block's start
for name, opts in (("dynamic", []), ("static", ["-o", "static=on"])):
    p = t(name + ".vdi")
    subprocess.check_call(["qemu-img", "create", "-q", "-f", "vdi"] + opts + [p, "3M"])
    subprocess.check_call(["qemu-io", "-f", "vdi", "-c", "write -P 0x66 1M 4k", p],
                          stdout=subprocess.DEVNULL)
    out("vdi", name + ".vdi", read(p, 1024 + 8192))

# QED: qemu-img's, 4 KiB clusters, two-cluster tables, one with a backing name
for name, opts in (("plain", "cluster_size=4k,table_size=2"),
                   ("backing", "cluster_size=4k,table_size=2,backing_file=b.raw,"
                               "backing_fmt=raw")):
    p = t(name + ".qed")
    if "backing" in name:
        open(t("b.raw"), "wb").write(b"\x77" * 65536)
    subprocess.check_call(["qemu-img", "create", "-q", "-f", "qed", "-o", opts, p, "1M"],
                          cwd=tmp)
    subprocess.check_call(["qemu-io", "-f", "qed", "-c", "write -P 0x88 8k 8k",
                           "-c", "write -z 64k 4k", p], stdout=subprocess.DEVNULL, cwd=tmp)
    out("qed", name + ".qed", read(p))


def pack_vhdx(path):
    data = read(path)
    res = bytearray(data[:320 * 1024])
    for m in range(1, -(-len(data) // MIB)):
        res += data[m * MIB:m * MIB + 64 * 1024].ljust(64 * 1024, b"\0")
    return bytes(res.rstrip(b"\0") or b"\0")


# VHDX: dynamic, with a log to replay (and a torn entry), differencing,
# 4 KiB logical sectors
v = hvimg.Vhdx(4 * MIB, MIB, items_at=4096)  # inside the 64 KiB kept of each MiB
v.add_block(0, b"\x99" * 4096)
v.add_block(2, b"\xaa" * 4096)
v.write(t("d.vhdx"))
out("vhdx", "dynamic.vhdx", pack_vhdx(t("d.vhdx")))
page = bytearray(read(t("d.vhdx"))[v.bat_off:v.bat_off + 4096])
page[8:16] = page[0:8]
g = uuid.uuid4().bytes
size = 4 * MIB  # less than the unpacked seed's length
e1 = hvimg.log_entry(5, g, [(v.bat_off, bytes(page)), ("zero", v.data_off, 4096)], size)
e2 = hvimg.log_entry(6, g, [(v.bat_off, bytes(page))], size, torn=0)
hvimg.inject_log(t("d.vhdx"), [(0, e1), (len(e1), e2)], g)
out("vhdx", "log.vhdx", pack_vhdx(t("d.vhdx")))
p = hvimg.Vhdx(4 * MIB, MIB, items_at=4096)
p.add_block(1, b"\xbb" * 4096)
c = hvimg.Vhdx(4 * MIB, MIB, items_at=4096, parent={"parent_linkage": hvimg.guid_str(p.dw_guid),
                                     "relative_path": ".\\p.vhdx"})
c.add_block(1, b"\xcc" * 4096, state=7)
c.add_bitmap(1, range(2048, 2056))
c.write(t("c.vhdx"))
out("vhdx", "diff.vhdx", pack_vhdx(t("c.vhdx")))
s = hvimg.Vhdx(8 * MIB, MIB, lss=4096, items_at=4096)
s.add_block(5, b"\xdd" * 4096)
s.write(t("s.vhdx"))
out("vhdx", "lss4k.vhdx", pack_vhdx(t("s.vhdx")))

subprocess.call(["rm", "-rf", tmp])
