#!/bin/bash
# Differential random writes: seeded lists of write / write -z [-u] /
# discard / flush / read commands run through qemu-io on one copy of an
# image and through qimg io on another, for cluster sizes 512..2M, refcount
# widths 1/16/64, v2 and v3, extended L2 entries, with and without a backing
# file.  After each batch: the same output, qemu-img compare identical,
# qemu-img check clean (no leaks) on qimg's copy.  Reads are verified
# against a byte model where it knows the contents.
# QIMG_LONG=1: more batches, longer lists, more seeds.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3

batches=2
ops=150
seeds=1
if [ -n "${QIMG_LONG:-}" ]; then
    batches=6
    ops=1500
    seeds=3
fi

filter_io() {
    sed -e 's/[0-9]* ops; [0-9/:. sec]* ([0-9/.inf]* [EPTGMKiBbytes]*\/sec and [0-9/.inf]* ops\/sec)/X ops; XX:XX:XX.X (XXX YYY\/sec and XXX ops\/sec)/' \
        -e 's/qemu-io: /qimg: /' -e 's/\(qemu\|qimg\)-io> //g'
}

# gen.py SEED SIZE CLUSTER BATCHES NOPS: write the command lists
# cmds-1.txt .. cmds-BATCHES.txt; the model of the contents (runs of known
# byte values or unknown) carries over from batch to batch in memory (one
# python3 per image).
cat >gen.py <<'PY'
import os, random, sys
sys.path.insert(0, os.environ["IOTESTS_DIR"])
import bytemodel
seed, size, cs, batches, nops = sys.argv[1:6]
size, cs, batches, nops = int(size), int(cs), int(batches), int(nops)
# The model (iotests/bytemodel.py).  Without a backing file everything reads
# as zeros; the backing file's contents are not modelled (unknown until
# written).
model = bytemodel.Model(size, 0 if os.environ.get("NO_BACKING") else None)

l2_span = cs * (cs // int(os.environ.get("L2E", "8")))
rnd = None

def pick_range():
    kind = rnd.random()
    if kind < 0.25:      # small, unaligned
        n = rnd.randint(1, 4096)
        off = rnd.randrange(0, size - n)
    elif kind < 0.5:     # sector aligned
        n = 512 * rnd.randint(1, 16)
        off = 512 * rnd.randrange(0, (size - n) // 512)
    elif kind < 0.8:     # whole clusters
        n = cs * rnd.randint(1, 4)
        n = min(n, size // 2)
        off = cs * rnd.randrange(0, (size - n) // cs)
    else:                # around an L2 table boundary, or the image end
        n = rnd.randint(1, 3 * cs)
        n = min(n, size // 4)
        if rnd.random() < 0.5 and l2_span < size:
            edge = l2_span * rnd.randrange(1, max(2, size // l2_span))
            edge = min(edge, size)
        else:
            edge = size
        off = max(0, min(size - n, edge - rnd.randint(0, n)))
    return off, n

for batch in range(1, batches + 1):
    rnd = random.Random("%s/%d" % (seed, batch))
    lines = []
    for i in range(nops):
        r = rnd.random()
        off, n = pick_range()
        lines.append(model.command(rnd, r, off, n))
    with open("cmds-%d.txt" % batch, "w") as f:
        f.write("\n".join(lines) + "\n")
PY

# run_config NAME SIZE CLUSTER L2E CREATE-ARGS...
run_config() {
    local name=$1 size=$2 cs=$3 l2e=$4 seed batch qrc mrc
    shift 4
    for seed in $(seq 1 $seeds); do
        rm -f "$name".q "$name".m cmds-*.txt
        "$QEMU_IMG" create -q -f qcow2 "$@" "$name".q "$size" || {
            _fail "$name: qemu-img create $*"
            return 1
        }
        cp "$name".q "$name".m
        IOTESTS_DIR=$IOTESTS_DIR L2E=$l2e python3 gen.py "$name-$seed" "$(numfmt --from=iec "$size")" "$cs" \
            "$batches" "$ops" || { _fail "$name: gen.py"; return 1; }
        for batch in $(seq 1 $batches); do
            local desc="$name seed $seed batch $batch"
            "$QEMU_IO" -t writeback "$name".q <cmds-$batch.txt >q.out 2>q.err
            qrc=$?
            "$QIMG" io -t writeback "$name".m <cmds-$batch.txt >m.out 2>m.err
            mrc=$?
            STEP_FILTER=filter_io same_step "$desc" "$name".q "$name".m "$qrc" "$mrc" ||
                return 1
        done
    done
}

rm -f base.qcow2
"$QEMU_IMG" create -q -f qcow2 base.qcow2 64M
"$QEMU_IO" -c 'write -P 0x5b 0 40M' -c 'write -z 8M 1M' base.qcow2 >/dev/null

NO_BACKING=1 run_config c512 16M 512 8 -o cluster_size=512
NO_BACKING=1 run_config c4k 64M 4096 8 -o cluster_size=4k
NO_BACKING=1 run_config c64k 64M 65536 8
NO_BACKING=1 run_config c2m 64M 2097152 8 -o cluster_size=2M
NO_BACKING=1 run_config r1 64M 4096 8 -o cluster_size=4k,refcount_bits=1
NO_BACKING=1 run_config r64 64M 65536 8 -o refcount_bits=64
NO_BACKING=1 run_config v2 64M 65536 8 -o compat=0.10
NO_BACKING=1 run_config v2s 16M 512 8 -o compat=0.10,cluster_size=512
NO_BACKING=1 run_config ext 64M 65536 16 -o extended_l2=on
NO_BACKING=1 run_config ext2m 64M 2097152 16 -o extended_l2=on,cluster_size=2M
run_config back 64M 65536 8 -b base.qcow2 -F qcow2
run_config backv2 64M 65536 8 -b base.qcow2 -F qcow2 -o compat=0.10
run_config backext 64M 32768 16 -b base.qcow2 -F qcow2 -o extended_l2=on,cluster_size=32k
run_config back512 48M 512 8 -b base.qcow2 -F qcow2 -o cluster_size=512,refcount_bits=64
if [ -n "${QIMG_LONG:-}" ]; then
    NO_BACKING=1 run_config r2 64M 1024 8 -o cluster_size=1k,refcount_bits=2
    NO_BACKING=1 run_config lazy 64M 65536 8 -o lazy_refcounts=on
    NO_BACKING=1 run_config ext16k 64M 16384 16 -o extended_l2=on,cluster_size=16k,refcount_bits=1
    run_config back2m 64M 2097152 8 -b base.qcow2 -F qcow2 -o cluster_size=2M
fi

finish
