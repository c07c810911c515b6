#!/bin/bash
# bench/nbd-bench.sh: NBD (issue 13's performance list) -- qimg nbd, qemu-nbd
# and nbdkit's file plugin on the same work in one run.
#
# Sources (SIZE_GIB, default 4): full.qcow2 (incompressible data everywhere)
# and half.qcow2 (50% data in 64 KiB .. 4 MiB extents), and full.raw.
# Cases (CASES selects; tools interleaved, ROUNDS rounds, default 3; caches
# dropped before every run):
#   read-full, read-half  nbdcopy EXPORT null: (4 connections where the
#                         server allows them): qimg nbd and qemu-nbd with
#                         their defaults and with --cache=none, and nbdkit's
#                         file plugin on the same data as raw (the floor)
#   write                 nbdcopy --flush full.raw into a new qcow2 export:
#                         qimg nbd and qemu-nbd, writeback (their default)
#                         and writethrough, and nbdkit's file plugin into a
#                         new raw file of the same size (the floor)
#   client                convert from a qemu-nbd export into a new qcow2:
#                         qimg convert vs qemu-img convert
# Every server serves up to 4 clients (-e 4 / -e 4) and is started before
# the timed command and stopped after it.  The "cpu s" column is the
# server's CPU time (user + sys, from its start to its stop) in the read
# and write cases, the client's in the client case.
set -u
. "$(dirname "$0")/lib.sh"

ROUNDS=${ROUNDS:-3}
SIZE_GIB=${SIZE_GIB:-4}
CASES=${CASES:-read-full read-half write client}
cd "$BENCH_SCRATCH" || exit 1
bench_require_space $((SIZE_GIB * 5 + 2))
PLUGIN=${QIMG_NBD_PLUGIN:-$(dirname "$QIMG")/../nbd/nbdkit-qimg-plugin.so}

echo "# nbd-bench: ${SIZE_GIB} GiB, $ROUNDS rounds, $(nproc) CPUs"
echo "# $("$QEMU_IMG" --version | head -n 1); $("$QIMG" --version | head -n 1); $(nbdkit --version)"

python3 - "$SIZE_GIB" <<'PY'
import os, random, sys
size = int(sys.argv[1]) << 30
rng = random.Random(20261202)
pool = os.urandom(64 << 20)
sizes = [64 << 10, 128 << 10, 256 << 10, 1 << 20, 2 << 20, 4 << 20]
with open('full.raw', 'wb') as f:
    for off in range(0, size, len(pool)):
        f.write(pool)
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
"$QEMU_IMG" convert -f raw -O qcow2 full.raw full.qcow2
"$QEMU_IMG" convert -f raw -O qcow2 half.raw half.qcow2
sync

drop_caches() {
    sync
    [ -w /proc/sys/vm/drop_caches ] && echo 3 >/proc/sys/vm/drop_caches
}

SOCK=$BENCH_SCRATCH/s.sock
URI="nbd+unix:///?socket=$SOCK"
SRV=
start() { # SERVER-COMMAND...: in the background, until the socket answers
    rm -f "$SOCK"
    "$@" >/dev/null 2>srv.err &
    SRV=$!
    for _ in $(seq 400); do
        nbdinfo --size "$URI" >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    echo "server did not start: $* ($(cat srv.err))" >&2
    exit 1
}
stop() { # sets SRV_CPU: the server's CPU seconds
    SRV_CPU=-
    if [ -n "$SRV" ]; then
        SRV_CPU=$(bench_pid_cpu "$SRV")
        kill "$SRV" 2>/dev/null && wait "$SRV" 2>/dev/null
    fi
    SRV=
}
trap 'stop; _bench_cleanup' EXIT

server() { # TOOL FILE [CACHE]
    local tool=$1 file=$2 cache=${3:-}
    case $tool in
    qimg) start "$QIMG" nbd -t -e 4 -k "$SOCK" ${cache:+--cache=$cache} "$file" ;;
    qemu-nbd) start qemu-nbd -t -e 4 -k "$SOCK" -f qcow2 ${cache:+--cache=$cache} "$file" ;;
    nbdkit-file) start nbdkit -f -U "$SOCK" file "$file" ;;
    esac
}

run_case() { # CASE TOOL: sets BENCH_T
    local c=$1 tool=$2 src
    case $c in
    read-*)
        src=${c#read-}
        case $tool in
        qimg | qemu-nbd) server "$tool" "$src.qcow2" ;;
        qimg-none) server qimg "$src.qcow2" none ;;
        qemu-nbd-none) server qemu-nbd "$src.qcow2" none ;;
        nbdkit-file) server nbdkit-file "$src.raw" ;;
        esac
        drop_caches
        bench_time BENCH_T nbdcopy "$URI" null:
        stop
        # shellcheck disable=SC2034 # read by bench_rounds (lib.sh)
        BENCH_C=$SRV_CPU ;;
    write)
        rm -f dst.qcow2 dst.raw
        "$QEMU_IMG" create -q -f qcow2 dst.qcow2 "${SIZE_GIB}G"
        case $tool in
        nbdkit-file)
            truncate -s "${SIZE_GIB}G" dst.raw
            server nbdkit-file dst.raw ;;
        qimg | qemu-nbd) server "$tool" dst.qcow2 ;;
        qimg-wt) server qimg dst.qcow2 writethrough ;;
        qemu-nbd-wt) server qemu-nbd dst.qcow2 writethrough ;;
        esac
        drop_caches
        bench_time BENCH_T nbdcopy --flush full.raw "$URI"
        stop
        # shellcheck disable=SC2034 # read by bench_rounds (lib.sh)
        BENCH_C=$SRV_CPU
        rm -f dst.qcow2 dst.raw ;;
    client)
        server qemu-nbd half.qcow2
        rm -f out.qcow2
        drop_caches
        case $tool in
        qimg) bench_time BENCH_T "$QIMG" convert -f raw -O qcow2 "$URI" out.qcow2 ;;
        qemu-img) bench_time BENCH_T "$QEMU_IMG" convert -f raw -O qcow2 "$URI" out.qcow2 ;;
        esac
        stop
        rm -f out.qcow2 ;;
    esac
}

for c in $CASES; do
    case $c in
    read-*) tools=(qemu-nbd qimg qemu-nbd-none qimg-none nbdkit-file) ;;
    write) tools=(qemu-nbd qimg qemu-nbd-wt qimg-wt nbdkit-file) ;;
    client) tools=(qemu-img qimg) ;;
    *) echo "unknown case $c" >&2; exit 1 ;;
    esac
    ncase() { run_case "$c" "$1"; }
    bench_rounds "$ROUNDS" ncase "${tools[@]}"
    bench_table "$c" "${tools[0]}" "${tools[@]}"
    bench_reset
done
