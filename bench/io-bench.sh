#!/bin/bash
# bench/io-bench.sh: the guest I/O path (issue 11's table) against qemu-img
# bench and the floor, fio on a raw file.
#
# The same requests for every tool: COUNT (default 60000) requests of 4 KiB,
# offsets 0, step, 2 step, ... modulo a SIZE_GIB (default 4) GiB image, step
# STEP (default 1 MiB + 4 KiB: every request lands in a different 64 KiB
# cluster; STEP=4096 writes sequentially, 16 requests per cluster, issue
# 30's sequential case -- fio-new still writes one request per cluster).
# Workloads (name: cache, depth, what):
#   alloc-d1      none, 1   allocating writes into an empty qcow2 image
#   alloc-d32     none, 32  the same at depth 32
#   alloc-wb-d32  writeback, 32, allocating (the flush at close included)
#   rewrite-d32   none, 32  writes to allocated clusters
#   rewrite-d1    none, 1   the same at depth 1 (latency)
#   read-d32      none, 32  reads of allocated clusters
#   read-d1       none, 1   the same at depth 1 (latency)
#   enc-rewrite-d32  none, 32  rewrites of an image with encrypt.format=luks
#                    (aes-256-xts-plain64, the default; issue 28's goal:
#                    >= 1.5x qemu-img bench)
#   enc-read-d32     none, 32  reads of that encrypted image
# The encrypted cases: qemu-img 7.2's bench takes no --object, so it cannot
# open an encrypted image; the peer there is qemu-io, and qimg runs twice:
# `qimg io` with the same command script as qemu-io (32 aio_write/aio_read,
# then aio_flush, which waits for them: depth 32 in batches), and `qimg
# bench` (depth 32 kept full).  The ratio column compares qimg io with
# qemu-io, the like-for-like pair.  Both open the image with --object
# secret and --image-opts; fio's floor is the same plain raw file.
# Tools: qemu-img (qemu-img bench; QEMU_IO for the encrypted cases), qimg
# (qimg bench; QIMG_BENCH_ARGS adds options such as "-i threads"),
# qimg-before (QIMG_BEFORE=binary; in the encrypted cases also
# qimg-io-before, its qimg io), and the
# floor: fio replaying the same offsets from an I/O log (O_DIRECT except for
# the writeback case, io_uring, fio's own run time including end_fsync) on a
# fully written raw file of the same size (for the allocating cases, too).
# The allocating cases add a second floor, fio-new: the writes qimg's file
# gets, 4 KiB at the start of each new 64 KiB cluster (qemu-img create's
# cluster size), appended in order, into a raw file fallocated just before
# (untimed): what the file system charges for filling preallocated space,
# unwritten extents converted one write at a time (issue 30: on ext4 this,
# not the fully written raw file, is the ceiling of the allocating path).
# And a third, fio-map: the host offsets qimg's file really gets -- guest
# clusters placed in the order they are first written, each request at its
# own offset inside its 64 KiB cluster (with the default STEP, 1 MiB +
# 4 KiB, that is (i mod 16) * 4 KiB: fio-new's writes all start a cluster,
# qimg's mostly land inside one, which ext4 converts as two splits of the
# unwritten extent, not one; with STEP=4096, 16 requests per cluster) --
# into a raw file fallocated just before.  The fio floors' CPU seconds are
# fio's own for the job (usr_cpu + sys_cpu of its run time).
# Every run: caches dropped (when root), memwarm, then one timed span for
# every tool, from its first request to its last write durable: fio's own
# run time (job_runtime: from the job's first I/O to the end of its
# end_fsync; its start-up, ~0.5-0.9 s here, left out), and for qemu-img
# bench and qimg bench from the line each prints right before its first
# request ("Sending ...", read through a pipe, stdout line-buffered by
# stdbuf) to the exit of the process -- its close, with the final flush --
# plus an fsync of the image (`sync FILE`: no global sync, which would
# also time other processes' dirty pages).  Their start-up (exec, open)
# is left out as fio's is.  qemu-io and qimg io print no such line: the
# encrypted cases time the whole process (then the same fsync).
# ROUNDS (default 3) rounds, tools interleaved in a
# rotating order.  Printed: per-round times and CPU seconds (user + sys of
# the process; fio's own are not taken), then IOPS medians and ratios to
# qemu-img and to fio (higher is better), each case followed by the median
# CPU seconds per tool (on a shared machine the steadier figure).  CASES
# selects workloads.
set -u
. "$(dirname "$0")/lib.sh"

ROUNDS=${ROUNDS:-3}
QEMU_IO=${QEMU_IO:-qemu-io}
COUNT=${COUNT:-60000}
SIZE_GIB=${SIZE_GIB:-4}
STEP=${STEP:-$((1024 * 1024 + 4096))}
CASES=${CASES:-alloc-d1 alloc-d32 alloc-wb-d32 rewrite-d32 rewrite-d1 read-d32 read-d1 enc-rewrite-d32 enc-read-d32}
QIMG_BEFORE=${QIMG_BEFORE:-}
read -ra QIMG_BENCH_ARGS <<<"${QIMG_BENCH_ARGS:-}"
command -v fio >/dev/null || { echo "fio not found (scripts/install-deps.sh)" >&2; exit 1; }
# tools_for WORKLOAD: sets tools (the peer first, then qimg)
tools_for() {
    case $1 in
    enc-*) tools=(qemu-io qimg-io qimg) ;;
    *) tools=(qemu-img qimg) ;;
    esac
    [ -n "$QIMG_BEFORE" ] && tools+=(qimg-before)
    [ -n "$QIMG_BEFORE" ] && [ "${1#enc-}" != "$1" ] && tools+=(qimg-io-before)
    tools+=(fio)
    [ "${1#alloc-}" != "$1" ] && tools+=(fio-new fio-map)
}
cd "$BENCH_SCRATCH" || exit 1
bench_require_space $((SIZE_GIB * 6 + 2))

echo "# io-bench: $COUNT x 4 KiB, step $STEP, ${SIZE_GIB} GiB, $ROUNDS rounds"
echo "# $("$QEMU_IMG" --version | head -n 1); $("$QIMG" --version | head -n 1); $(fio --version)"

drop_caches() {
    sync
    [ -w /proc/sys/vm/drop_caches ] && echo 3 >/proc/sys/vm/drop_caches
}

# io_time VAR FILE CMD...: bench_time's rules (memwarm first, BENCH_C the
# CPU seconds of CMD, BENCH_RUN_TIMEOUT), timing the span the header
# describes: from CMD's "Sending" line (or its start, when it prints
# none) to its exit and an fsync of FILE.  VAR := seconds.
io_time() {
    local __var=$1 file=$2 t0 t1 c0 mark
    shift 2
    bench_warm
    c0=$(bench_children_cpu)
    t0=$EPOCHREALTIME
    mark=$(
        { timeout "$BENCH_RUN_TIMEOUT" stdbuf -oL "$@" || echo "io_time: failed $?"; } |
            {
                m=
                while IFS= read -r line; do
                    case $line in
                    Sending*) [ -z "$m" ] && m=$EPOCHREALTIME ;;
                    "io_time: failed"*) m=$line ;;
                    esac
                done
                echo "$m"
            }
    )
    case $mark in
    "io_time: failed"*)
        [ "${mark##* }" = 124 ] && echo "timed out after $BENCH_RUN_TIMEOUT s (a hang?): $*" >&2
        echo "failed: $*" >&2
        exit 1
        ;;
    esac
    BENCH_C=$(awk -v a="$c0" -v b="$(bench_children_cpu)" 'BEGIN { printf "%.2f", b - a }')
    sync "$file"
    t1=$EPOCHREALTIME
    printf -v "$__var" '%s' "$(awk -v a="${mark:-$t0}" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')"
}

# A fully written raw file for fio, and one prepared qcow2 image per qcow2
# tool (allocated by that tool, untimed) for rewrites and reads.
dd if=/dev/zero of=floor.raw bs=1M count=$((SIZE_GIB * 1024)) oflag=direct status=none
for op in write read; do
    {
        echo "fio version 2 iolog"
        echo "floor.raw add"
        echo "floor.raw open"
        awk -v n="$COUNT" -v step="$STEP" -v size=$((SIZE_GIB << 30)) -v op=$op \
            'BEGIN { for (i = 0; i < n; i++) printf "floor.raw %s %.0f 4096\n", op, (i * step) % size }'
        echo "floor.raw close"
    } >$op.iolog
done
{
    echo "fio version 2 iolog"
    echo "new.raw add"
    echo "new.raw open"
    awk -v n="$COUNT" -v size=$((SIZE_GIB << 30)) \
        'BEGIN { for (i = 0; i < n; i++) printf "new.raw write %.0f 4096\n", (i * 65536) % size }'
    echo "new.raw close"
} >new.iolog
{
    echo "fio version 2 iolog"
    echo "new.raw add"
    echo "new.raw open"
    awk -v n="$COUNT" -v step="$STEP" -v size=$((SIZE_GIB << 30)) \
        'BEGIN { for (i = 0; i < n; i++) { g = (i * step) % size; c = int(g / 65536)
                 if (!(c in host)) host[c] = nh++
                 printf "new.raw write %.0f 4096\n", host[c] * 65536 + g % 65536 } }'
    echo "new.raw close"
} >map.iolog
ENC_SECRET=secret,id=sec0,data=bench-passphrase
# enc_args IMG: the image options that open IMG with its LUKS key
enc_args() {
    echo "--object $ENC_SECRET --image-opts driver=qcow2,file.filename=$1,encrypt.key-secret=sec0"
}
# prepared BIN IMG [enc]: IMG allocated by BIN (untimed); with enc, an
# encrypted image (created by qemu-img with its defaults but a short
# iter-time: the key derivation is not what is measured)
prepared() {
    local bin=$1 img=$2 enc=${3:-} open
    if [ ! -e "$img" ]; then
        if [ -n "$enc" ]; then
            # its PBKDF2 benchmark fails now and then on a busy machine
            # ("Unable to get accurate CPU usage"): try again
            for _ in 1 2 3 4 5 6 7 8; do
                "$QEMU_IMG" create -q -f qcow2 --object "$ENC_SECRET" \
                    -o encrypt.format=luks,encrypt.key-secret=sec0,encrypt.iter-time=10 \
                    "$img" "${SIZE_GIB}G" 2>create.err && break
                grep -q 'accurate CPU' create.err || { cat create.err >&2; exit 1; }
            done
            read -ra open <<<"$(enc_args "$img")"
        else
            "$QEMU_IMG" create -q -f qcow2 "$img" "${SIZE_GIB}G"
            open=(-f qcow2 "$img")
        fi
        "$bin" bench -w -c "$COUNT" -s 4k -S "$STEP" -d 32 -t none "${open[@]}" >/dev/null
        sync
    fi
}

# run_case WORKLOAD TOOL: sets BENCH_T
run_case() {
    local w=$1 tool=$2 cache depth mode bin img
    case $w in
    alloc-d1) cache=none depth=1 mode=alloc ;;
    alloc-d32) cache=none depth=32 mode=alloc ;;
    alloc-wb-d32) cache=writeback depth=32 mode=alloc ;;
    rewrite-d32) cache=none depth=32 mode=rewrite ;;
    rewrite-d1) cache=none depth=1 mode=rewrite ;;
    read-d32) cache=none depth=32 mode=read ;;
    read-d1) cache=none depth=1 mode=read ;;
    enc-rewrite-d32) cache=none depth=32 mode=rewrite ;;
    enc-read-d32) cache=none depth=32 mode=read ;;
    esac
    local enc=
    [ "${w#enc-}" != "$w" ] && enc=1
    if [ "$tool" = fio ] || [ "$tool" = fio-new ] || [ "$tool" = fio-map ]; then
        local direct=1 log=write.iolog file=floor.raw tc
        [ $mode = read ] && log=read.iolog
        [ $cache = writeback ] && direct=0
        if [ "$tool" != fio ]; then
            log=${tool#fio-}.iolog file=new.raw
            rm -f new.raw
            fallocate -l "${SIZE_GIB}G" new.raw
        fi
        drop_caches
        bench_warm
        # fio's own run time (its start-up, ~0.3 s, is not I/O) and the
        # job's CPU seconds
        tc=$(fio --name=floor --filename=$file --read_iolog=$log --bs=4k \
            --direct=$direct --iodepth="$depth" --ioengine=io_uring --end_fsync=1 \
            --output-format=json |
            python3 -c 'import json,sys; j = json.load(sys.stdin)["jobs"][0]; t = j["job_runtime"] / 1000
print(t, "%.2f" % (t * (j["usr_cpu"] + j["sys_cpu"]) / 100))')
        read -r BENCH_T BENCH_C <<<"$tc"
        [ "$tool" != fio ] && rm -f new.raw
        return
    fi
    if [ "$tool" = qemu-io ] || [ "$tool" = qimg-io ] || [ "$tool" = qimg-io-before ]; then
        local io=("$QEMU_IO")
        [ "$tool" = qimg-io ] && io=("$QIMG" io)
        [ "$tool" = qimg-io-before ] && io=("$QIMG_BEFORE" io)
        img=prep-qimg-enc.qcow2
        prepared "$QIMG" "$img" 1
        read -ra open <<<"$(enc_args "$img")"
        drop_caches
        io_time BENCH_T "$img" "${io[@]}" -t "$cache" "${open[@]}" <"$mode.qemu-io"
        return
    fi
    case $tool in
    qemu-img) bin=$QEMU_IMG ;;
    qimg) bin=$QIMG ;;
    qimg-before) bin=$QIMG_BEFORE ;;
    esac
    local args=(-c "$COUNT" -s 4k -S "$STEP" -d "$depth" -t "$cache") open
    [ "$tool" != qemu-img ] && args+=("${QIMG_BENCH_ARGS[@]}")
    if [ $mode = alloc ]; then
        img=alloc.qcow2
        rm -f $img
        "$QEMU_IMG" create -q -f qcow2 $img "${SIZE_GIB}G"
        args+=(-w)
    else
        img=prep-$tool${enc:+-enc}.qcow2
        prepared "$bin" "$img" $enc
        [ $mode = rewrite ] && args+=(-w --pattern=7)
    fi
    if [ -n "$enc" ]; then
        read -ra open <<<"$(enc_args "$img")"
    else
        open=(-f qcow2 "$img")
    fi
    drop_caches
    io_time BENCH_T "$img" "$bin" bench "${args[@]}" "${open[@]}"
    [ $mode = alloc ] && rm -f alloc.qcow2
}

iops() { awk -v c="$COUNT" -v t="$1" 'BEGIN { if (t > 0) printf "%.1fk", c / t / 1000; else print "-" }'; }

# The qemu-io scripts of the encrypted cases: the same requests as the
# others, in batches of 32 closed by aio_flush
for mode in rewrite read; do
    awk -v n="$COUNT" -v step="$STEP" -v size=$((SIZE_GIB << 30)) -v mode=$mode 'BEGIN {
        cmd = mode == "read" ? "aio_read -q" : "aio_write -q -P 7"
        for (i = 0; i < n; i++) {
            printf "%s %.0f 4k\n", cmd, (i * step) % size
            if (i % 32 == 31 || i == n - 1) print "aio_flush"
        }
    }' >$mode.qemu-io
done

declare -A MED=() CPU=() TOOLS=()
for w in $CASES; do
    tools_for "$w"
    TOOLS[$w]="${tools[*]}"
    wcase() { run_case "$w" "$1"; }
    bench_rounds "$ROUNDS" wcase "${tools[@]}"
    for t in "${tools[@]}"; do
        read -ra ts <<<"${BENCH_RESULT[$t]}"
        MED[$w.$t]=$(bench_median "${ts[@]}")
        read -ra cs <<<"${BENCH_CPU[$t]//-/}"
        CPU[$w.$t]=$( ((${#cs[@]})) && bench_median "${cs[@]}" || echo -)
        echo "# $w $t: ${BENCH_RESULT[$t]} (cpu s: ${BENCH_CPU[$t]})"
    done
    bench_reset
done

echo
for w in $CASES; do
    read -ra tools <<<"${TOOLS[$w]}"
    peer=${tools[0]} mine=${tools[1]}
    printf '%-16s' "$w"
    for t in "${tools[@]}"; do printf ' %s %s' "$t" "$(iops "${MED[$w.$t]}")"; done
    printf '  %s/%s %s  qimg/fio %s\n' "$mine" "$peer" \
        "$(bench_ratio "${MED[$w.$peer]}" "${MED[$w.$mine]}")" \
        "$(bench_ratio "${MED[$w.fio]}" "${MED[$w.qimg]}")"
    [ -n "${MED[$w.fio-new]:-}" ] &&
        printf '%-16s qimg/fio-new %s  qimg/fio-map %s\n' "" \
            "$(bench_ratio "${MED[$w.fio-new]}" "${MED[$w.qimg]}")" \
            "$(bench_ratio "${MED[$w.fio-map]}" "${MED[$w.qimg]}")"
    printf '%-16s cpu s:' ""
    for t in "${tools[@]}"; do printf ' %s %s' "$t" "${CPU[$w.$t]}"; done
    echo
done
