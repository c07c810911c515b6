#!/bin/bash
# Crash consistency: kill -9 a "qimg io" that runs a long list of writes at
# a random moment.  The list flushes every few writes and prints a marker
# ("length") after each flush, so the test knows which writes were durable.
# Afterwards:
#  - qemu-img check finds no corruption (leaks are allowed),
#  - every sector holds either what it held after the last completed flush
#    or what one of the later writes (up to the one in flight) put there,
#  - qimg can open the image again, write to it, and it stays clean.
# A few dozen trials; QIMG_LONG=1 runs hundreds.
. "$(dirname "$0")/../common.sh"
requires qimg qemu-img qemu-io python3

trials=16
[ -n "${QIMG_LONG:-}" ] && trials=300

configs=("" "-o cluster_size=4k" "-o cluster_size=512,refcount_bits=1"
    "-o extended_l2=on,cluster_size=32k" "-o compat=0.10" "-o refcount_bits=64,cluster_size=2M")

# gen.py SEED: the command list (writes are 512-byte aligned; write k uses
# pattern 1 + k % 255, write -z pattern 0).
cat >gen.py <<'PY'
import random, sys
rnd = random.Random(sys.argv[1])
size, cs = int(sys.argv[2]), int(sys.argv[3])
flush_every = rnd.choice([1, 3, 10, 40])
k = 0
for i in range(40000):
    r = rnd.random()
    if r < 0.4:
        n = 512 * rnd.randint(1, 16)
    elif r < 0.8:
        n = cs * rnd.randint(1, 3)
    else:
        n = 512 * rnd.randint(1, 400)
    n = min(n, size // 4)
    off = 512 * rnd.randrange(0, (size - n) // 512 + 1)
    if rnd.random() < 0.1:
        print("write -z %d %d" % (off, n))
    else:
        print("write -P %d %d %d" % (1 + k % 255, off, n))
    k += 1
    if k % flush_every == 0:
        print("flush")
        print("length")
PY

# verify.py CMDS OUT RAW: check the contents against the list and the output.
cat >verify.py <<'PY'
import sys
cmds = [l.split() for l in open(sys.argv[1]) if l.strip()]
out = open(sys.argv[2]).read()
raw = open(sys.argv[3], "rb").read()
# writes completed: every "wrote" in the output; durable: those before the
# last flush marker (the "64 MiB" line of "length")
done = out.count("wrote ")
last_marker = out.rfind("64 MiB\n")
durable = out[:last_marker].count("wrote ") if last_marker >= 0 else 0
writes = [c for c in cmds if c[0] == "write"]
def parse(c):
    if c[1] == "-z":
        return 0, int(c[2]), int(c[3])
    return int(c[2]), int(c[3]), int(c[4])
nsec = len(raw) // 512
base = bytearray(nsec)          # sector value after the durable writes
for c in writes[:durable]:
    v, off, n = parse(c)
    base[off // 512:(off + n) // 512] = bytes([v]) * (n // 512)
allowed = [None] * nsec         # extra values from later writes
for c in writes[durable:done + 1]:
    v, off, n = parse(c)
    for s in range(off // 512, (off + n) // 512):
        if allowed[s] is None:
            allowed[s] = set()
        allowed[s].add(v)
bad = 0
for s in range(nsec):
    sec = raw[s * 512:(s + 1) * 512]
    v = sec[0]
    ok = sec.count(v) == 512 and (v == base[s] or (allowed[s] and v in allowed[s]))
    if not ok:
        if bad < 5:
            print("sector %d (offset %d): byte %d, expected %d%s" %
                  (s, s * 512, v, base[s],
                   "" if not allowed[s] else " or one of %s" % sorted(allowed[s])))
        bad += 1
print("writes completed %d, durable %d, bad sectors %d" % (done, durable, bad))
sys.exit(1 if bad else 0)
PY

for t in $(seq 1 $trials); do
    cfg=${configs[$((t % ${#configs[@]}))]}
    cs=65536
    case "$cfg" in
    *4k*) cs=4096 ;;
    *512*) cs=512 ;;
    *32k*) cs=32768 ;;
    *2M*) cs=2097152 ;;
    esac
    desc="trial $t ($cfg)"
    rm -f img.qcow2 img.raw out.txt
    # shellcheck disable=SC2086
    "$QEMU_IMG" create -q -f qcow2 $cfg img.qcow2 64M
    python3 gen.py "crash-$t" 67108864 $cs >cmds.txt

    "$QIMG" io -t writeback img.qcow2 <cmds.txt >out.txt 2>err.txt &
    pid=$!
    sleep "$(python3 -c "import random; random.seed($t); print(random.uniform(0.05, 0.8))")"
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null

    "$QEMU_IMG" check img.qcow2 >check.txt 2>&1
    rc=$?
    _checks=$((_checks + 1))
    if [ $rc != 0 ] && [ $rc != 3 ]; then
        _fail "$desc: qemu-img check exit code $rc"
        head -n 20 check.txt
        continue
    fi
    "$QEMU_IMG" convert -O raw img.qcow2 img.raw
    _checks=$((_checks + 1))
    if ! python3 verify.py cmds.txt out.txt img.raw >verify.txt; then
        _fail "$desc: contents"
        cat verify.txt
        continue
    fi

    # The crashed image is usable again: repair the leaks, write to it with
    # qimg (and to a copy with qemu-io); it is as clean as qemu-io's copy
    # (qemu-io itself may leak a cluster here with 1-bit refcounts).
    "$QEMU_IMG" check -q -r leaks img.qcow2 >/dev/null 2>&1
    cp img.qcow2 img-q.qcow2
    reopen=(-t writeback -c 'write -P 0xee 1M 3M' -c 'write -z 20M 1M' -c 'discard 30M 2M'
        -c flush)
    assert_rc "$desc: reopen and write" 0 "$QIMG" io "${reopen[@]}" img.qcow2
    "$QEMU_IO" "${reopen[@]}" img-q.qcow2 >/dev/null 2>&1
    "$QEMU_IMG" check img-q.qcow2 >/dev/null 2>&1
    assert_rc "$desc: check after reopening" $? "$QEMU_IMG" check img.qcow2
    assert_rc "$desc: same contents as qemu-io's" 0 "$QEMU_IMG" compare img.qcow2 img-q.qcow2
done

finish
