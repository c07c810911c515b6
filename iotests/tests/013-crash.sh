#!/bin/bash
# Crash consistency: kill -9 a "qimg io" that runs a long list of writes at
# a random moment.  The list flushes every few writes and prints a marker
# ("length") after each flush, so the test knows which writes were durable.
# Afterwards:
#  - qemu-img check finds no corruption (leaks are allowed),
#  - every sector holds either what it held after the last completed flush
#    or what one of the later writes (up to the one in flight) put there,
#  - qimg can open the image again, write to it, and it stays clean.
# make test: 16 trials (every configuration at least twice); QIMG_LONG=1
# (make check-long): 300.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3

trials=16
[ -n "${QIMG_LONG:-}" ] && trials=300

configs=("" "-o cluster_size=4k" "-o cluster_size=512,refcount_bits=1"
    "-o extended_l2=on,cluster_size=32k" "-o compat=0.10" "-o refcount_bits=64,cluster_size=2M")

# gen.py SEED SIZE CLUSTER LIST: the command list (writes are 512-byte
# aligned; write k uses pattern 1 + k % 255, write -z pattern 0), written to
# stdout for qimg io as it reads and to LIST.  Made as it is read: a trial
# runs well under a second, the list is long enough for any machine, and a
# python3 that wrote all of it first would cost more than the trial.
cat >gen.py <<'PY'
import os, random, sys
rnd = random.Random(sys.argv[1])
size, cs = int(sys.argv[2]), int(sys.argv[3])
flush_every = rnd.choice([1, 3, 10, 40])
k = 0
lst = open(sys.argv[4], "w")
def emit(line):  # to LIST first: every line qimg io reads is in it
    lst.write(line)
    sys.stdout.write(line)
try:
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
            emit("write -z %d %d\n" % (off, n))
        else:
            emit("write -P %d %d %d\n" % (1 + k % 255, off, n))
        k += 1
        if k % flush_every == 0:
            emit("flush\nlength\n")
    sys.stdout.flush()
except BrokenPipeError:  # qimg io was killed: the list ends here
    lst.close()
    os._exit(0)  # (no flush into the broken pipe on the way out)
lst.close()
PY

# verify.py CMDS OUT RAW: check the contents against the list and the output.
cat >verify.py <<'PY'
import os, sys
cmds = [l.split() for l in open(sys.argv[1]) if l.strip()]
out = open(sys.argv[2]).read()
fd = os.open(sys.argv[3], os.O_RDONLY)
size = os.fstat(fd).st_size
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
nsec = size // 512
base = bytearray(nsec)          # sector value after the durable writes
for c in writes[:durable]:
    v, off, n = parse(c)
    base[off // 512:(off + n) // 512] = bytes([v]) * (n // 512)
SECTOR = [bytes([v]) * 512 for v in range(256)]
allowed = [None] * nsec         # extra values from later writes
for c in writes[durable:done + 1]:
    v, off, n = parse(c)
    for s in range(off // 512, (off + n) // 512):
        if allowed[s] is None:
            allowed[s] = set()
        allowed[s].add(v)
# the disk is read in chunks; a chunk that reads as the durable writes left
# it is fine as a whole, the others are checked sector by sector (holes of
# the sparse file read zeros, and are not read)
CHUNK = 1 << 16
data = []
pos = 0
while pos < size:
    try:
        start = os.lseek(fd, pos, os.SEEK_DATA)
    except OSError:
        break
    pos = os.lseek(fd, start, os.SEEK_HOLE)
    data.append((start, pos))
bad = 0
k = 0
for pos in range(0, nsec * 512, CHUNK):
    end = min(pos + CHUNK, nsec * 512)
    while k < len(data) and data[k][1] <= pos:
        k += 1
    if k < len(data) and data[k][0] < end:
        chunk = os.pread(fd, end - pos, pos)
        chunk += bytes(end - pos - len(chunk))
        if chunk == b"".join([SECTOR[v] for v in base[pos // 512:end // 512]]):
            continue  # every sector here reads its durable value
    elif not any(base[pos // 512:end // 512]):
        continue  # a hole, where the durable writes left zeros
    else:
        chunk = bytes(end - pos)
    for s in range(pos // 512, end // 512):
        sec = chunk[s * 512 - pos:(s + 1) * 512 - pos]
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

# the kill times of the trials (seconds after the start)
mapfile -t delays < <(python3 -c '
import random, sys
for t in range(1, int(sys.argv[1]) + 1):
    random.seed(t)
    print(random.uniform(0.05, 0.8))' "$trials")

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

    python3 gen.py "crash-$t" 67108864 $cs cmds.txt | "$QIMG" io -t writeback img.qcow2 \
        >out.txt 2>err.txt &
    pid=$!
    sleep "${delays[$((t - 1))]}"
    kill -9 $pid 2>/dev/null
    wait 2>/dev/null # (gen.py too: cmds.txt is complete)

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
