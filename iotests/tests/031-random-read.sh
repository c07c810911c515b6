#!/bin/bash
# Differential random reads through the qimg command: for a few images from
# the read matrix (030), read random unaligned ranges (biased towards
# cluster and subcluster boundaries and the end of the disk) and compare
# them with the bytes of qemu-img convert -O raw.
#
# With "qimg io" the ranges are read with 'read -v OFF LEN' and the hex
# dump is decoded; its dump lines must also equal qemu-io's.  Without it,
# qimg convert -O raw is sliced with dd and compared with the hex dumps that
# qemu-io prints for the same ranges (a second oracle beside qemu-img).
#
# QIMG_SEED fixes the random seed (it is printed on failure).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3

MiB=$((1024 * 1024))
SEED=${QIMG_SEED:-$RANDOM$RANDOM}

if "$QIMG" io --help >/dev/null 2>&1; then
    MODE=io
else
    MODE=convert
fi

head -c $((4 * MiB)) /dev/urandom >rand.bin
yes 'random reads through the command 0123456789' | head -c $((4 * MiB)) >text.bin
SIZE=$((5 * MiB + 4321 * 512))

# scribble IMG: data at varied offsets, zeroes and discards.
scribble() {
    qio "$1" \
        "write -q -s rand.bin 0 1000" "write -q -P 0x11 4000 200" \
        "write -q -s rand.bin 65000 70000" "write -q -P 0x22 $((MiB + 512)) 65543" \
        "write -q -s rand.bin $((2 * MiB - 3000)) 9000" "write -q -P 0x33 $((SIZE - 700)) 700" \
        "write -q -z $((MiB + 4096)) 8192" "write -q -z -u $((2 * MiB - 65536)) 65536" \
        "discard -q $((2 * MiB)) 65536" "write -q -P 0x44 $((2 * MiB + 100)) 300" \
        "write -q -s rand.bin $((3 * MiB + 777)) 300000"
}

# A 512-byte-cluster v2 image over a qcow2 base.
qi create -f qcow2 -o cluster_size=4k base.qcow2 $SIZE
qio base.qcow2 "write -q -s rand.bin 0 3M" "write -q -P 0x81 $((4 * MiB)) 1M"
qi create -f qcow2 -o compat=0.10,cluster_size=512 -b base.qcow2 -F qcow2 v2-512.qcow2
scribble v2-512.qcow2
# 2 MiB clusters, v3.
qi create -f qcow2 -o cluster_size=2M big.qcow2 $SIZE
scribble big.qcow2
# Compressed (zstd and zlib), from a mixed raw file.
truncate -s $SIZE mixed.raw
dd if=text.bin of=mixed.raw bs=64k count=16 conv=notrunc status=none
dd if=rand.bin of=mixed.raw bs=64k seek=20 count=5 conv=notrunc status=none
dd if=text.bin of=mixed.raw bs=4k seek=800 skip=5 count=77 conv=notrunc status=none
qi convert -c -O qcow2 -o compression_type=zstd,cluster_size=4k mixed.raw zstd.qcow2
qi convert -c -O qcow2 -o compression_type=zlib mixed.raw zlib.qcow2
# Extended L2 over a raw base, with subcluster writes.
qi create -f qcow2 -o extended_l2=on,cluster_size=64k -b mixed.raw -F raw xl2.qcow2
qio xl2.qcow2 "write -q -P 0x74 2048 2048" "write -q -P 0x75 $((64 * 1024 + 30 * 2048)) 6000" \
    "write -q -z 8192 4096" "discard -q $((1024 * 1024)) 64k" \
    "write -q -s rand.bin $((3 * MiB + 1000)) 100000"
# External data file, and a 3-deep chain with a short raw base.
qi create -f qcow2 -o data_file=df.data df.qcow2 $SIZE
scribble df.qcow2
head -c $((MiB + 1234)) rand.bin >short.raw
qi create -f qcow2 -o cluster_size=16k -b short.raw -F raw mid.qcow2 $((3 * MiB))
qio mid.qcow2 "write -q -P 0x91 100000 300000" "write -q -z $((MiB - 5000)) 100000"
qi create -f qcow2 -b mid.qcow2 -F qcow2 top.qcow2 $SIZE
scribble top.qcow2

for img in v2-512.qcow2 big.qcow2 zstd.qcow2 zlib.qcow2 xl2.qcow2 df.qcow2 top.qcow2; do
    qi convert -O raw "$img" expected.raw
    cs=$("$QEMU_IMG" info --output=json "$img" | sed -n 's/.*"cluster-size": \([0-9]*\).*/\1/p' | head -n 1)
    _checks=$((_checks + 1))
    if ! python3 - "$img" "$MODE" "$SEED" "$cs" <<'PY'; then
import os, random, re, subprocess, sys, zlib

img, mode, seed, cs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
qimg, qemu_io = os.environ['QIMG'], os.environ['QEMU_IO']
expected = open('expected.raw', 'rb').read()
size = len(expected)
rng = random.Random(seed ^ zlib.crc32(img.encode()))

# Random ranges: half start near a cluster or subcluster boundary.
ranges = [(0, 1), (size - 1, 1), (max(0, size - 5000), min(size, 5000))]
while len(ranges) < 60:
    if rng.random() < 0.5:
        unit = rng.choice([cs, max(512, cs // 32), 512, 65536])
        off = rng.randrange(0, size // unit + 1) * unit + rng.randint(-700, 700)
    else:
        off = rng.randrange(0, size)
    off = max(0, min(off, size - 1))
    length = rng.choice([1, 2, 511, 512, 513, 4095, 4097, 65537,
                         rng.randint(1, 3000), rng.randint(1, 200000)])
    length = min(length, size - off)
    ranges.append((off, length))

dump_re = re.compile(r'^([0-9a-f]{8}):  ((?:[0-9a-f]{2} )+) ')
stat_re = re.compile(r'^read (\d+)/(\d+) bytes at offset (\d+)$')

def parse(text):
    """Split 'read -v' output into [(offset, bytes, dump lines)]."""
    reads, data, lines = [], bytearray(), []
    for line in text.splitlines():
        m = dump_re.match(line)
        if m:
            data += bytes.fromhex(m.group(2).replace(' ', ''))
            lines.append(line)
            continue
        m = stat_re.match(line)
        if m:
            reads.append((int(m.group(3)), bytes(data), lines))
            data, lines = bytearray(), []
    return reads

def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        print('%s exited %d: %s' % (' '.join(cmd[:3]), p.returncode,
                                    p.stderr.decode(errors='replace')[:500]))
        sys.exit(1)
    return p.stdout.decode(errors='replace')

args = []
for off, length in ranges:
    args += ['-c', 'read -v %d %d' % (off, length)]
q = parse(run([qemu_io, '-r', '-f', 'qcow2'] + args + [img]))
if mode == 'io':
    m = parse(run([qimg, 'io', '-r', '-f', 'qcow2'] + args + [img]))
else:
    # qimg convert -O raw, sliced.
    run([qimg, 'convert', '-O', 'raw', img, 'qimg.raw'])
    got = open('qimg.raw', 'rb').read()
    m = [(off, got[off:off + length], None) for off, length in ranges]

bad = 0
if len(q) != len(ranges) or len(m) != len(ranges):
    print('%s: %d ranges, qemu-io printed %d reads, qimg %d' % (img, len(ranges), len(q), len(m)))
    sys.exit(1)
for (off, length), (qoff, qdata, qlines), (moff, mdata, mlines) in zip(ranges, q, m):
    want = expected[off:off + length]
    if qdata != want or qoff != off:
        print('%s: oracle disagreement: qemu-io read %d+%d != qemu-img convert' % (img, off, length))
        bad += 1
    elif mdata != want or moff != off:
        first = next((i for i in range(min(len(want), len(mdata))) if want[i] != mdata[i]),
                     min(len(want), len(mdata)))
        print('%s: qimg read %d+%d differs (got %d bytes, first difference at offset %d)'
              % (img, off, length, len(mdata), off + first))
        bad += 1
    elif mlines is not None and mlines != qlines:
        print('%s: qimg io read -v %d %d: hex dump lines differ from qemu-io' % (img, off, length))
        bad += 1
    if bad >= 5:
        break
sys.exit(1 if bad else 0)
PY
        _fail "$img: random reads (mode $MODE, QIMG_SEED=$SEED)"
    fi
    rm -f expected.raw qimg.raw
done

echo "mode: $MODE"
finish
