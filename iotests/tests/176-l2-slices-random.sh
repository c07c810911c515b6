#!/bin/bash
# The L2 cache of slices (l2-cache-entry-size, qcow2/cluster.c invariant 6)
# under load, with a cache of two slices (l2-cache-size = 2 x the entry
# size: nearly every lookup misses and evicts): seeded lists of writes,
# zero writes (with and without unmap), discards, flushes and reads, with
# internal snapshots created, applied and deleted between them and, at the
# end, an overlay committed into the image, for 4k and 64k clusters,
# extended L2 entries, entry sizes 512 to the cluster size.  qimg runs each
# step with the small cache, qemu-io / qemu-img with the same options on a
# copy: the same output, reads checked against a byte model (it follows
# the snapshots), qemu-img check clean after each step, and qemu-img
# compare identical after each step that changes the active layer (all
# but snapshot create and delete: the next step compares it).  Then the crash-state explorer (iotests/crash/, as 050) with
# 512-byte slices: every power-loss state checks clean and keeps what a
# flush covered (4 states a case; QEMU's positive control for the first
# case only, every case with QIMG_LONG=1: crash/lib.sh).
. "${0%/*}/../common.sh"
CRASH_STATES=${CRASH_STATES:-4}
CRASH_CONTROL_STATES=${CRASH_CONTROL_STATES:-2}
. "$IOTESTS_DIR/crash/lib.sh"
requires qimg qemu-img qemu-io python3

ops=70
[ -n "${QIMG_LONG:-}" ] && ops=600

# gen.py SEED SIZE CLUSTER NOPS: plan.txt, one step a line: "io N" (run
# cmds-N.txt), "create NAME", "apply NAME", "delete NAME", "commit N"
# (cmds-N.txt through an overlay, then commit it); the model of the
# contents (runs of known byte values or unknown) follows every step.
cat >gen.py <<'PY'
import os, random, sys
sys.path.insert(0, os.environ["IOTESTS_DIR"])
import bytemodel
seed, size, cs, nops = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rnd = random.Random(seed)
model = bytemodel.Model(size, 0)
snaps = {}

def pick_range():
    k = rnd.random()
    if k < 0.3:
        n = rnd.randint(1, 8192)
    elif k < 0.7:
        n = cs * rnd.randint(1, 6)
    else:
        n = rnd.randint(cs, 40 * cs)
    n = min(n, size // 4)
    off = rnd.randrange(0, size - n)
    if rnd.random() < 0.5:
        off -= off % min(cs, 4096)
    return off, n

def cmds(idx, final_reads):
    lines = []
    for _ in range(nops):
        r = rnd.random()
        off, n = pick_range()
        lines.append(model.command(rnd, r, off, n))
    if final_reads:  # every known run, read back
        for start, n, v in model.runs():
            if v is not None:
                lines.append("read -P %d %d %d" % (v, start, n))
    with open("cmds-%d.txt" % idx, "w") as f:
        f.write("\n".join(lines) + "\n")

plan, n = [], 0
def io(final=False):
    global n
    n += 1
    cmds(n, final)
    plan.append("io %d" % n)
def snapshot(op, name):
    global model
    if op == "create":
        snaps[name] = model.copy()
    elif op == "apply":
        model = snaps[name].copy()
    plan.append("%s %s" % (op, name))
io()
snapshot("create", "s1")
io()
snapshot("create", "s2")
io()
snapshot("apply", "s1")
io(True)
snapshot("delete", "s1")
io()
snapshot("apply", "s2")
io(True)
n += 1
cmds(n, False)
plan.append("commit %d" % n)
io(True)
with open("plan.txt", "w") as f:
    f.write("\n".join(plan) + "\n")
PY

# filter_step: q.out, m.out, q.err and m.err through io_filter (common.sh;
# its expressions here, in one sed for the four files: sed -i edits each
# file on its own) and without the prompts of commands read from stdin;
# only where the tools' outputs differ byte for byte.  as_is: the filter
# same_step reads them through then (as_is_var: its builtin twin).
filter_step() {
    same_bytes q.out m.out && same_bytes q.err m.err && return 0
    sed -i -e 's/[0-9]* ops; [0-9/:. sec]* ([0-9/.inf]* [EPTGMKiBbytes]*\/sec and [0-9/.inf]* ops\/sec)/X ops; TIME/' \
        -e 's/^qemu-io: /qimg: /' -e 's/^qemu-img: /qimg: /' -e 's/\(qemu\|qimg\)-io> //g' \
        q.out m.out q.err m.err
}
as_is() { cat; }
as_is_var() {
    local _t
    _t=$(<"$2")
    printf -v "$1" '%s' "$_t"
}

# run_config NAME SIZE CLUSTER ENTRY CREATE-OPTS
run_config() {
    local name=$1 size=$2 cs=$3 entry=$4 copts=$5 step arg qrc mrc
    local small="l2-cache-entry-size=$entry,l2-cache-size=$((2 * entry))"
    rm -f "$name".q "$name".m "$name".oq "$name".om cmds-*.txt plan.txt
    "$QEMU_IMG" create -q -f qcow2 -o "$copts" "$name".q "$size" || {
        _fail "$name: create"
        return 1
    }
    cp "$name".q "$name".m
    IOTESTS_DIR=$IOTESTS_DIR python3 gen.py "$name" "$(numfmt --from=iec "$size")" "$cs" "$ops" || {
        _fail "$name: gen.py"
        return 1
    }
    while read -r step arg; do
        local desc="$name: $step $arg"
        case $step in
        io)
            "$QEMU_IO" --image-opts "driver=qcow2,file.filename=$name.q,$small" \
                <cmds-"$arg".txt >q.out 2>q.err
            qrc=$?
            "$QIMG" io --image-opts "driver=qcow2,file.filename=$name.m,$small" \
                <cmds-"$arg".txt >m.out 2>m.err
            mrc=$?
            ;;
        create | apply | delete)
            "$QEMU_IMG" snapshot "-${step:0:1}" "$arg" "$name".q >q.out 2>q.err
            qrc=$?
            "$QIMG" snapshot --image-opts "-${step:0:1}" "$arg" \
                "driver=qcow2,file.filename=$name.m,$small" >m.out 2>m.err
            mrc=$?
            ;;
        commit)
            "$QEMU_IMG" create -q -f qcow2 -o "$copts" -b "$name".q -F qcow2 "$name".oq
            "$QEMU_IMG" create -q -f qcow2 -o "$copts" -b "$name".m -F qcow2 "$name".om
            "$QEMU_IO" "$name".oq <cmds-"$arg".txt >q.out 2>q.err &&
                "$QEMU_IMG" commit -q "$name".oq >>q.out 2>>q.err
            qrc=$?
            "$QIMG" io --image-opts "driver=qcow2,file.filename=$name.om,$small" \
                <cmds-"$arg".txt >m.out 2>m.err &&
                "$QIMG" commit -q --image-opts \
                    "driver=qcow2,file.filename=$name.om,$small,backing.$small" >>m.out 2>>m.err
            mrc=$?
            ;;
        esac
        filter_step
        case $step in
        create | delete)
            # the active layer as it was (the next step compares it): the
            # same outputs, and qimg's copy checks clean
            assert_eq "$desc: exit code" "$qrc" "$mrc"
            assert_same_filtered "$desc: output" as_is q.out m.out
            assert_same_filtered "$desc: errors" as_is q.err m.err
            assert_rc "$desc: check (no leaks)" 0 "$QEMU_IMG" check "$name".m
            [ "$_failures" -eq 0 ] || return 1
            ;;
        *) STEP_FILTER=as_is same_step "$desc" "$name".q "$name".m "$qrc" "$mrc" || return 1 ;;
        esac
    done <plan.txt
    assert_eq "$name: snapshots" "$("$QEMU_IMG" snapshot -l "$name".q | awk 'NR > 2 {print $2}')" \
        "$("$QEMU_IMG" snapshot -l "$name".m | awk 'NR > 2 {print $2}')"
}

run_config c4k-512 8M 4096 512 cluster_size=4k
run_config c4k-4k 8M 4096 4096 cluster_size=4k,refcount_bits=1
run_config c64k-512 48M 65536 512 cluster_size=64k
run_config c64k-8k 48M 65536 8192 cluster_size=64k,lazy_refcounts=on
run_config x16k-512 16M 16384 512 cluster_size=16k,extended_l2=on
run_config x64k-1k 48M 65536 1024 cluster_size=64k,extended_l2=on
run_config x64k-64k 48M 65536 65536 cluster_size=64k,extended_l2=on

# power-loss states with 512-byte slices in a cache of two
M=$((1 << 20))
OPEN_OPTS=",l2-cache-entry-size=512,l2-cache-size=1k" crash_io_case slice-64k $((64 * M)) \
    65536 "" --ops 60
OPEN_OPTS=",l2-cache-entry-size=512,l2-cache-size=1k" crash_io_case slice-xl2-16k \
    $((32 * M)) 16384 "-o extended_l2=on,cluster_size=16k" --ops 60
crash_summary
finish
