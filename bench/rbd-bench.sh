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
#   aio-read   the asynchronous path: qimg bench and qemu-img bench reading
#              the RBD image, 64 KiB requests, 32 in flight (-d 32)
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
    local c=$1 tool=$2
    case $c in
    to-rbd)
        case $tool in
        qemu-img) bench_time BENCH_T "$QEMU_IMG" convert -O raw src.qcow2 rbd:rbd/dst ;;
        qemu-img-W-m16)
            bench_time BENCH_T "$QEMU_IMG" convert -W -m 16 -O raw src.qcow2 rbd:rbd/dst ;;
        qimg) bench_time BENCH_T "$QIMG" convert -O raw src.qcow2 rbd:rbd/dst ;;
        qimg-m16) bench_time BENCH_T "$QIMG" convert -m 16 -O raw src.qcow2 rbd:rbd/dst ;;
        rbd-import) bench_time BENCH_T rbd import --no-progress half.raw rbd/dst ;;
        esac
        "$QEMU_IMG" compare -q src.qcow2 rbd:rbd/dst || { echo "$tool: copy differs" >&2; exit 1; }
        rbd rm --no-progress rbd/dst ;;
    from-rbd)
        rm -f out.qcow2
        case $tool in
        qemu-img) bench_time BENCH_T "$QEMU_IMG" convert -O qcow2 rbd:rbd/src out.qcow2 ;;
        qimg) bench_time BENCH_T "$QIMG" convert -O qcow2 rbd:rbd/src out.qcow2 ;;
        rbd-export)
            bench_time BENCH_T rbd export --no-progress rbd/src out.raw
            cmp -s half.raw out.raw || { echo "rbd export: copy differs" >&2; exit 1; } ;;
        esac
        rm -f out.qcow2 out.raw ;;
    nbd-read)
        case $tool in
        qemu-nbd) start qemu-nbd -t -e 4 -k "$SOCK" -f raw rbd:rbd/src ;;
        qimg) start "$QIMG" nbd -t -e 4 -k "$SOCK" -f raw rbd:rbd/src ;;
        esac
        bench_time BENCH_T nbdcopy "$URI" null:
        stop ;;
    aio-read)
        case $tool in
        qemu-img) bench_time BENCH_T "$QEMU_IMG" bench -c 8192 -d 32 -s 65536 -f raw \
            rbd:rbd/src ;;
        qimg) bench_time BENCH_T "$QIMG" bench -c 8192 -d 32 -s 65536 -f raw rbd:rbd/src ;;
        esac ;;
    esac
}

for c in $CASES; do
    case $c in
    to-rbd) tools=(qemu-img qimg qemu-img-W-m16 qimg-m16 rbd-import) ;;
    from-rbd) tools=(qemu-img qimg rbd-export) ;;
    nbd-read) tools=(qemu-nbd qimg) ;;
    aio-read) tools=(qemu-img qimg) ;;
    *) echo "unknown case $c" >&2; exit 1 ;;
    esac
    rcase() { run_case "$c" "$1"; }
    bench_rounds "$ROUNDS" rcase "${tools[@]}"
    bench_table "$c" "${tools[0]}" "${tools[@]}"
    bench_reset
done
