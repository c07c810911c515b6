#!/bin/bash
# bench/rbd-bench.sh: Ceph RBD (issue 27's performance goals) -- qimg and
# qemu-img (with qemu-block-extra) on the same one-machine cluster, in one
# run, interleaved in rounds, medians and per-round ratios.
#
# The cluster: scripts/ceph-micro.sh with CEPH_OSDS (default 2) in-memory
# OSDs of OSD_MIB (default 3072) each, started here and stopped at the
# end.  The source: a SIZE_GIB (default 2) qcow2 with 50% data (64 KiB ..
# 4 MiB extents of incompressible data), and its raw copy on RBD.
# Cases (CASES selects; ROUNDS rounds, default 3):
#   to-rbd     convert src.qcow2 into a new RBD image (removed after each
#              run): qimg and qemu-img with their defaults, and both with
#              -m 16 (qemu-img with -W, its fastest); the floor: Ceph's own
#              `rbd import` of the same bytes from a sparse raw file in the
#              page cache (it skips zero blocks as the converts do)
#   from-rbd   convert the RBD image into a new qcow2 file; the floor: `rbd
#              export` of the image into a new sparse raw file
#   nbd-read   nbdcopy reading an export of the RBD image (4 connections
#              where the server allows them): qimg nbd -e 4 and qemu-nbd -e 4
#              (the cpu column: the server's CPU during the copy, nbdcopy's
#              left out)
#   aio-read   the asynchronous path: qimg bench and qemu-img bench reading
#              the RBD image, 64 KiB requests, 32 in flight (-d 32)
# The cluster's own limit, measured in the same rounds: rados-write and
# rados-read are `rados bench` (4 MiB objects, 16 in flight, 4 s of writes,
# then a sequential read of them) turned into the time the cluster needs
# for the case's bytes at that rate (to-rbd: the data's allocated bytes;
# from-rbd: the RBD image's used bytes); their cpu column is rados bench's.
# Each case's second table is the cluster's CPU (monitor and OSDs) during
# each timed run: on 2 cores the daemons and the client share the CPU.
# QIMG_BEFORE=PATH (a qimg built before a change) adds its rows,
# qimg-before, to every case, interleaved with the others.
# Goals: to-rbd and from-rbd >= 1.5x qemu-img convert's speed, nbd-read
# >= 1.3x qemu-nbd's (the ratio column: time / the first tool's time, so
# below 1 is faster).  The machine is shared: report figures with that
# caveat.
set -u
. "$(dirname "$0")/lib.sh"

ROUNDS=${ROUNDS:-3}
SIZE_GIB=${SIZE_GIB:-2}
CEPH_OSDS=${CEPH_OSDS:-2}
OSD_MIB=${OSD_MIB:-3072}
CASES=${CASES:-to-rbd from-rbd nbd-read aio-read}
cd "$BENCH_SCRATCH" || exit 1
bench_require_space $((SIZE_GIB * 4 + 1))
for t in ceph-mon ceph-osd rbd nbdcopy qemu-nbd; do
    command -v "$t" >/dev/null || { echo "$t not found (scripts/install-deps.sh)" >&2; exit 1; }
done
"$QEMU_IMG" --help | grep -q 'Supported formats:.* rbd' ||
    { echo "qemu-img has no RBD (qemu-block-extra)" >&2; exit 1; }

CLUSTER=$(mktemp -d /tmp/qimg-bench-ceph.XXXXXX)
SRV=
stop() {
    [ -n "$SRV" ] && kill "$SRV" 2>/dev/null && wait "$SRV" 2>/dev/null
    SRV=
}
trap 'stop; "$REPO_DIR/scripts/ceph-micro.sh" stop "$CLUSTER"; rm -rf "$CLUSTER"; _bench_cleanup' EXIT
CEPH_MICRO_OSD_MIB=$OSD_MIB "$REPO_DIR/scripts/ceph-micro.sh" start "$CLUSTER" "$CEPH_OSDS" \
    >/dev/null || exit 1
export CEPH_CONF=$CLUSTER/ceph.conf

echo "# rbd-bench: ${SIZE_GIB} GiB qcow2 (50% data), $ROUNDS rounds, $(nproc) CPUs," \
    "$CEPH_OSDS memstore OSDs"
echo "# $("$QEMU_IMG" --version | head -n 1); $("$QIMG" --version | head -n 1);" \
    "$(ceph --version | cut -d' ' -f1-3)"

python3 - "$SIZE_GIB" <<'PY'
import os, random, sys
size = int(sys.argv[1]) << 30
rng = random.Random(20261205)
pool = os.urandom(64 << 20)
sizes = [64 << 10, 128 << 10, 256 << 10, 1 << 20, 2 << 20, 4 << 20]
with open('half.raw', 'wb') as f:
    f.truncate(size)
    off = 0
    while off < size:
        n = min(rng.choice(sizes), (size - off) // 2)
        if n <= 0:
            break
        p = rng.randrange(0, len(pool) - n, 4096)
        f.seek(off)
        f.write(pool[p:p + n])
        off += 2 * n
PY
"$QEMU_IMG" convert -f raw -O qcow2 half.raw src.qcow2
"$QEMU_IMG" convert -O raw src.qcow2 rbd:rbd/src || exit 1
sync
DATA_BYTES=$(du -B1 half.raw | cut -f1)
USED_BYTES=$(rbd du --format json rbd/src | python3 -c \
    'import json, sys; print(json.load(sys.stdin)["images"][0]["used_size"])')

since() { # BEFORE NOW: NOW - BEFORE, CPU seconds
    awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'
}

cluster_cpu() { # CPU seconds of this cluster's daemons so far
    local f p s=0
    for f in "$CLUSTER"/*.pid; do
        read -r p <"$f" || continue
        s=$(awk -v a="$s" -v b="$(bench_pid_cpu "$p")" 'BEGIN { printf "%.2f", a + b }')
    done
    echo "$s"
}
declare -A CLUSTER_CPU=()
KC=
ktime() { # bench_time's arguments; KC := the cluster's CPU seconds meanwhile
    local k0
    k0=$(cluster_cpu)
    bench_time "$@"
    KC=$(since "$k0" "$(cluster_cpu)")
}

rados_floor() { # write|read BYTES: BENCH_T := BYTES at rados bench's rate;
    # BENCH_C and KC: rados bench's and the cluster's CPU seconds
    local mode=$1 bytes=$2 out bw c0 k0
    local args=(write -b 4194304 --no-cleanup)
    if [ "$mode" = read ]; then # the objects to read
        rados bench -p rbd 4 write -b 4194304 -t 16 --no-cleanup >/dev/null || exit 1
        args=(seq)
    fi
    bench_warm
    c0=$(bench_children_cpu)
    k0=$(cluster_cpu)
    out=$(rados bench -p rbd 4 "${args[@]}" -t 16) || exit 1
    BENCH_C=$(since "$c0" "$(bench_children_cpu)")
    KC=$(since "$k0" "$(cluster_cpu)")
    rados -p rbd cleanup >/dev/null 2>&1
    bw=$(awk -F: '/^Bandwidth \(MB\/sec\)/ { print $2 }' <<<"$out")
    [ -n "$bw" ] || { echo "rados bench printed no bandwidth" >&2; exit 1; }
    BENCH_T=$(awk -v b="$bytes" -v r="$bw" 'BEGIN { printf "%.3f", b / (r * 1048576) }')
}

SOCK=$BENCH_SCRATCH/s.sock
URI="nbd+unix:///?socket=$SOCK"
start() { # SERVER-COMMAND...: in the background, until the socket answers
    rm -f "$SOCK"
    "$@" >/dev/null 2>srv.err &
    SRV=$!
    for _ in $(seq 600); do
        nbdinfo --size "$URI" >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    echo "server did not start: $* ($(cat srv.err))" >&2
    exit 1
}

run_case() { # CASE TOOL: sets BENCH_T
    local c=$1 tool=$2 q=$QIMG
    if [ "$tool" = qimg-before ]; then
        q=$QIMG_BEFORE
        tool=qimg
    fi
    case $c in
    to-rbd)
        case $tool in
        qemu-img) ktime BENCH_T "$QEMU_IMG" convert -O raw src.qcow2 rbd:rbd/dst ;;
        qemu-img-W-m16)
            ktime BENCH_T "$QEMU_IMG" convert -W -m 16 -O raw src.qcow2 rbd:rbd/dst ;;
        qimg) ktime BENCH_T "$q" convert -O raw src.qcow2 rbd:rbd/dst ;;
        qimg-m16) ktime BENCH_T "$q" convert -m 16 -O raw src.qcow2 rbd:rbd/dst ;;
        rbd-import) ktime BENCH_T rbd import --no-progress half.raw rbd/dst ;;
        rados-write)
            rados_floor write "$DATA_BYTES"
            return ;;
        esac
        "$QEMU_IMG" compare -q src.qcow2 rbd:rbd/dst || { echo "$tool: copy differs" >&2; exit 1; }
        rbd rm --no-progress rbd/dst ;;
    from-rbd)
        rm -f out.qcow2
        case $tool in
        qemu-img) ktime BENCH_T "$QEMU_IMG" convert -O qcow2 rbd:rbd/src out.qcow2 ;;
        qimg) ktime BENCH_T "$q" convert -O qcow2 rbd:rbd/src out.qcow2 ;;
        rbd-export)
            ktime BENCH_T rbd export --no-progress rbd/src out.raw
            cmp -s half.raw out.raw || { echo "rbd export: copy differs" >&2; exit 1; } ;;
        rados-read) rados_floor read "$USED_BYTES" ;;
        esac
        rm -f out.qcow2 out.raw ;;
    nbd-read)
        case $tool in
        qemu-nbd) start qemu-nbd -t -e 4 -k "$SOCK" -f raw rbd:rbd/src ;;
        qimg) start "$q" nbd -t -e 4 -k "$SOCK" -f raw rbd:rbd/src ;;
        esac
        local s0
        s0=$(bench_pid_cpu "$SRV")
        ktime BENCH_T nbdcopy "$URI" null:
        BENCH_C=$(since "$s0" "$(bench_pid_cpu "$SRV")")
        stop ;;
    aio-read)
        case $tool in
        qemu-img) ktime BENCH_T "$QEMU_IMG" bench -c 8192 -d 32 -s 65536 -f raw \
            rbd:rbd/src ;;
        qimg) ktime BENCH_T "$q" bench -c 8192 -d 32 -s 65536 -f raw rbd:rbd/src ;;
        esac ;;
    esac
}

for c in $CASES; do
    case $c in
    to-rbd) tools=(qemu-img qimg qemu-img-W-m16 qimg-m16 rbd-import rados-write) ;;
    from-rbd) tools=(qemu-img qimg rbd-export rados-read) ;;
    nbd-read) tools=(qemu-nbd qimg) ;;
    aio-read) tools=(qemu-img qimg) ;;
    *) echo "unknown case $c" >&2; exit 1 ;;
    esac
    if [ -n "${QIMG_BEFORE:-}" ]; then
        tools+=(qimg-before)
    fi
    rcase() {
        KC=-
        run_case "$c" "$1"
        CLUSTER_CPU[$1]="${CLUSTER_CPU[$1]:-}${CLUSTER_CPU[$1]:+ }$KC"
    }
    if [ "$c" = to-rbd ]; then
        # untimed: the OSDs' first writes after start cost them more CPU
        # (seen: 2.70 s of cluster CPU for the first run, 1.5-1.7 s after),
        # which would go to whichever tool runs first
        "$QEMU_IMG" convert -O raw src.qcow2 rbd:rbd/dst && rbd rm --no-progress rbd/dst ||
            exit 1
    fi
    bench_rounds "$ROUNDS" rcase "${tools[@]}"
    bench_table "$c" "${tools[0]}" "${tools[@]}"
    echo "  cluster cpu s (monitor + OSDs during each timed run):"
    for t in "${tools[@]}"; do
        read -ra k <<<"${CLUSTER_CPU[$t]}"
        printf '    %-22s %9s  %s\n' "$t" "$(bench_median "${k[@]}")" "${CLUSTER_CPU[$t]}"
    done
    bench_reset
    CLUSTER_CPU=()
done
