#!/usr/bin/env python3
"""Regenerate the VMDK seeds of fuzz/seeds/ (vmdk-*.vmdk): small images of
every structure fuzz-vmdk-open parses, built with iotests/tests/
090-vmdkgen.py's writers.  Usage: fuzz/make-vmdk-seeds.py [outdir]"""
import importlib.util
import os
import random
import struct
import sys

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "vmdkgen", os.path.join(here, "..", "iotests", "tests", "090-vmdkgen.py"))
gen = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gen)
out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "seeds")
rng = random.Random(1)
G = 4096


def grains(n, every):
    return {g: gen.pattern(rng, G) for g in range(0, n, every)}


p = lambda name: os.path.join(out, name)
d = gen.desc("monolithicSparse", ['RW 256 SPARSE "vmdk-sparse.vmdk"'])
gs = grains(32, 3)
gs[4] = None  # a zeroed grain
gen.write_sparse(p("vmdk-sparse.vmdk"), 128 << 10, gs, grain=G, gtes=16, descriptor=d,
                 zero_grain=True)
gen.write_stream(p("vmdk-stream.vmdk"), 128 << 10, grains(32, 5), grain=G)
gen.write_cowd(p("vmdk-cowd.vmdk"), 128 << 10, grains(32, 4), grain=G)
with open(p("vmdk-desc.vmdk"), "wb") as f:
    f.write(gen.desc("twoGbMaxExtentSparse",
                     ['RW 64 FLAT "flat.bin" 2', 'RW 2048 SPARSE "sparse.vmdk"',
                      'RDONLY 8 FLAT "flat.bin" 0', 'RW 16 VMFS "flat.bin"'],
                     cid=0xabcdef01, parent_cid=0x1234, parent="parent.vmdk"))
# a lone COWD file opens only with CIDs where QEMU looks for them (0x200)
with open(p("vmdk-cowd.vmdk"), "r+b") as f:
    f.seek(512)
    f.write(b"CID=5\nparentCID=ffffffff\n")
