#!/bin/bash
# Power-loss states of the other commands that write metadata (the
# crash-state explorer, iotests/crash/): resize grow (L1 growth), grow with
# preallocation=metadata and falloc (qcow2/prealloc.c: batches of L2
# tables, refcount blocks made many at a time, a refcount area; with small
# clusters the refcount table is replaced on the way) and shrink, check -r
# leaks and -r all, commit (emptying the top), convert -O qcow2 with and without -c, and create with
# preallocation=metadata/falloc/full, also with small clusters (the same
# driver code on a new image, create.c), each on the recording node.  In every state qemu-img check finds no corruption and
# the disk reads as the operation allows: resize keeps the data (grown
# area zeros; a shrink's cut-off tail reads old data or zeros), a repair
# changes no data, a convert target reads source data or zeros (and the
# finished target equals the source), a new preallocated image reads
# zeros (before its header is durable the file need not be an image yet:
# crash/states.py always cuts just before and just after the flush that
# covers a new header, so a creation's few states include images -- before,
# all 4 of metadata-512's and metadata-xl2's fell before the header).
# qemu-img over blklogwrites is the positive control for resize and check.
. "${0%/*}/../common.sh"
# make test: every case, 4 power-loss states each (identical states are
# judged once), the positive control (2 states) for the first case only
# (crash/lib.sh: it judges nothing of qimg's); QIMG_LONG=1 (make
# check-long): lib.sh's 200 states, and the control (100) in every case
CRASH_STATES=${CRASH_STATES:-4}
CRASH_CONTROL_STATES=${CRASH_CONTROL_STATES:-2}
. "$IOTESTS_DIR/crash/lib.sh"
requires qimg qemu-img qemu-io python3

# prepare DIR CREATE-OPTS: DIR/img0.qcow2 with data, DIR/A0.raw its
# contents; every operation starts from a copy (fresh).
prepare() {
    local d=$1 copts=$2
    rm -rf "$d"
    mkdir -p "$d"
    # shellcheck disable=SC2086
    "$QEMU_IMG" create -q -f qcow2 $copts "$d/img0.qcow2" 8M
    "$QEMU_IO" -c 'write -P 0x31 0 2M' -c 'write -P 0x32 3M 1M' -c 'write -P 0x33 7M 1M' \
        "$d/img0.qcow2" >/dev/null
    "$QEMU_IMG" convert -O raw "$d/img0.qcow2" "$d/A0.raw"
    head -c 4M "$d/A0.raw" >"$d/A4.raw"
}

# fresh DIR: DIR/img.qcow2 as prepare left it
fresh() {
    cp "$1/img0.qcow2" "$1/img.qcow2"
}

# refcounts with leaks (and, with "error", a used cluster counted 0)
damage() {
    python3 - "$1" "$2" <<'PY'
import struct, sys
path, mode = sys.argv[1], sys.argv[2]
f = open(path, "r+b")
h = f.read(104)
cb = struct.unpack_from(">I", h, 20)[0]
rt, rtc = struct.unpack_from(">QI", h, 48)
order = struct.unpack_from(">I", h, 96)[0] if struct.unpack_from(">I", h, 4)[0] >= 3 else 4
width, per = (1 << order) // 8, 1 << (cb + 3 - order)
f.seek(rt)
table = struct.unpack(">%dQ" % (rtc << (cb - 3)), f.read(rtc << cb))
def slot(i):  # file offset of cluster i's refcount, or None
    rb = table[i // per] if i // per < len(table) else 0
    return rb + (i % per) * width if rb else None
def get(i):
    f.seek(slot(i)); return int.from_bytes(f.read(width), "big")
def put(i, v):
    f.seek(slot(i)); f.write(v.to_bytes(width, "big"))
last = 0
for t, rb in enumerate(table):  # the last cluster with a refcount
    if rb:
        f.seek(rb)
        blk = f.read(per * width)
        for j in range(per - 1, -1, -1):
            if any(blk[j * width:(j + 1) * width]):
                last = max(last, t * per + j)
                break
leaks = [i for i in range(last + 1, last + 6) if slot(i) is not None]
for i in leaks:  # clusters counted but used by nothing
    put(i, 1)
if mode == "error":  # a used cluster counted 0
    put(last, 0)
f.close()
print("leaked %d clusters%s" % (len(leaks), ", zeroed cluster %d" % last if mode == "error" else ""))
PY
}

ops_cases() {
    local cfg=$1 copts=$2 d=$SCRATCH/$1

    prepare "$d" "$copts"
    fresh "$d"
    CONTROL_ARGS=(resize --image-opts @IMGOPTS@ 4G)
    crash_op "resize-grow-$cfg" "$d" --expect-raw "$d/A0.raw" -- resize @IMG@ 4G

    for p in metadata falloc; do
        fresh "$d"
        CONTROL_ARGS=(resize --preallocation=$p --image-opts @IMGOPTS@ 40M)
        crash_op "resize-$p-$cfg" "$d" --expect-raw "$d/A0.raw" -- \
            resize --preallocation=$p @IMG@ 40M
    done

    fresh "$d"
    CONTROL_ARGS=(resize --shrink --image-opts @IMGOPTS@ 4M)
    crash_op "resize-shrink-$cfg" "$d" --expect-raw "$d/A0.raw,$d/A4.raw" \
        --expect-mode per-sector -- resize --shrink @IMG@ 4M

    fresh "$d"
    damage "$d/img.qcow2" leaks
    CONTROL_ARGS=(check -r leaks --image-opts @IMGOPTS@)
    cp "$d/img.qcow2" "$d/damaged.qcow2"
    crash_op "check-leaks-$cfg" "$d" --expect-raw "$d/A0.raw" \
        --base-errors "$d/damaged.qcow2" -- check -r leaks @IMG@

    fresh "$d"
    damage "$d/img.qcow2" error
    CONTROL_ARGS=(check -r all --image-opts @IMGOPTS@)
    cp "$d/img.qcow2" "$d/damaged.qcow2"
    crash_op "check-all-$cfg" "$d" --expect-raw "$d/A0.raw" \
        --base-errors "$d/damaged.qcow2" -- check -r all @IMG@
    unset CONTROL_ARGS
}

# commit: the top is emptied after the base holds its data (commit.c fact
# 3); the chain reads the same in every state.  v3 is reset completely
# (qcow2/empty.c: dirty bit first, then new refcount structures and L1),
# v2 emptied by discards.
commit_case() {
    local cfg=$1 copts=$2 d=$SCRATCH/commit-$1

    rm -rf "$d"
    mkdir -p "$d"
    # shellcheck disable=SC2086
    "$QEMU_IMG" create -q -f qcow2 $copts "$d/b.qcow2" 8M
    # shellcheck disable=SC2086
    "$QEMU_IMG" create -q -f qcow2 $copts -b "$d/b.qcow2" -F qcow2 "$d/img.qcow2"
    "$QEMU_IO" -c 'write -P 0x41 0 1M' "$d/b.qcow2" >/dev/null
    "$QEMU_IO" -c 'write -P 0x42 512k 2M' -c 'write -P 0x43 6M 64k' "$d/img.qcow2" \
        >/dev/null
    "$QEMU_IMG" convert -O raw "$d/img.qcow2" "$d/A.raw"
    crash_op "commit-$cfg" "$d" --expect-raw "$d/A.raw" -- commit @IMG@
}
commit_case v3-64k ""
commit_case v3-512 "-o cluster_size=512"
commit_case v2-4k "-o compat=0.10,cluster_size=4k"

ops_cases v3-64k ""
ops_cases v3-512 "-o cluster_size=512"
ops_cases v2-4k "-o compat=0.10,cluster_size=4k"
ops_cases rc64-16k "-o refcount_bits=64,cluster_size=16k"

# convert and create: the target is new (base: empty)
d=$SCRATCH/convert
mkdir -p "$d"
python3 -c '
import os, random, sys
r = random.Random(5)
with open(sys.argv[1], "wb") as f:
    for i in range(256):  # 16 MiB: half data, half zeros
        f.write(os.urandom(65536) if r.random() < 0.5 else bytes(65536))
' "$d/src.raw"
for v in "plain:" "compressed:-c" "xl2:-o extended_l2=on" "v2-4k:-o compat=0.10,cluster_size=4k"; do
    name=${v%%:*}
    args=${v#*:}
    rm -f "$d/img.qcow2" "$d/log"
    # shellcheck disable=SC2086
    if ! (cd "$d" && "$QIMG" convert -t writeback -O qcow2 $args src.raw \
        "record:$d/log:img.qcow2" >op.out 2>&1); then
        _fail "convert $name failed"
        cat "$d/op.out"
        continue
    fi
    assert_rc "convert $name: the target equals the source" 0 \
        "$QEMU_IMG" compare -q "$d/src.raw" "$d/img.qcow2"
    crash_explore "qimg-convert-$name" --log "$d/log" --base "$d/img.qcow2=" \
        --image "$d/img.qcow2" --allow-no-image --expect-raw "$d/src.raw,zero" \
        --expect-mode per-sector
done

for v in metadata: falloc: full: metadata-512:,cluster_size=512 \
    falloc-4k-rc64:,cluster_size=4k,refcount_bits=64 metadata-xl2:,extended_l2=on; do
    name=${v%%:*}
    p=${name%%-*}
    d=$SCRATCH/create-$name
    mkdir -p "$d"
    if ! (cd "$d" && "$QIMG" create -q -f qcow2 -o "preallocation=$p${v#*:}" \
        "record:$d/log:img.qcow2" 32M >op.out 2>&1); then
        _fail "create $name failed"
        cat "$d/op.out"
        continue
    fi
    crash_explore "qimg-create-$name" --log "$d/log" --base "$d/img.qcow2=" \
        --image "$d/img.qcow2" --allow-no-image --expect-raw zero
done

crash_summary
finish
