#!/bin/bash
# bench/convert-bench.sh: convert (issue 12's table) -- qimg, qemu-img and
# the floor on the same work in one run.
#
# Sources (SIZE_GIB, default 4): full.raw, incompressible data everywhere;
# half.raw, the same data in extents of 64 KiB .. 4 MiB alternating with
# holes (50% data); for -c, the first CSIZE_GIB (default 1) of full.raw.
# Cases (CASES selects; each: tools interleaved, ROUNDS rounds, default 3):
#   full-warm, half-warm    raw -> qcow2, source in the page cache
#   full-cold, half-cold    raw -> qcow2, caches dropped before each run
#   full-direct, half-direct  -t none -T none, caches dropped
#   zlib, zstd              -c (-o compression_type=zstd), 1 GiB full
#   loop-raw, loop-qcow2    -n -O raw / -n -O qcow2 onto a loop device
#                           (half and full sources; skipped without losetup)
#   luks-in, luks-out       raw -> qcow2 with encrypt.format=luks (aes-256-xts,
#                           iter-time=10: the key slot costs little) and that
#                           image -> raw, CSIZE_GIB of full.raw, warm
#   luksfmt-in, luksfmt-out the same with the luks format (-O luks)
#   from-vhdx, from-vpc, from-vdi  a dynamic VHDX, a dynamic VHD, a VDI made
#                           by qemu-img from the first 2 GiB of half.raw (50%
#                           data) -> qcow2, caches dropped (issue 26); their
#                           floors: reading the source, and cp of the same
#                           data as raw (h2.raw) read cold, written, synced
#   to-vpc-fixed, to-vhdx   those 2 GiB of raw -> a fixed VHD / a dynamic
#                           VHDX, source cached, the final sync timed
#   from-vmdk               a monolithicSparse VMDK made by qemu-img from
#                           those 2 GiB -> qcow2, caches dropped (issue 32:
#                           goal qimg >= 1.2x faster than qemu-img)
#   from-vmdk-stream(-warm) a streamOptimized VMDK made by qemu-img from them
#                           (compressed grains) -> qcow2, caches dropped
#                           (warm: source cached) (goal >= 1.5x faster)
#   to-vmdk-stream          those 2 GiB of raw -> a streamOptimized VMDK,
#                           source cached, the final sync timed (goal >= 1.8x)
# Tools per case: qemu-img with its defaults and with -W -m 16, qimg with
# its defaults, and the floors: cp (warm); for cold, direct and loop: the
# source read alone (dd iflag=direct: floor), the bytes the copy writes --
# the whole source, or half's data extents packed -- written alone from the
# page cache (dd oflag=direct: floor-write), and both at once (floor-both:
# those two dd side by side, the time until both ended and synced).  Every timed run: memwarm, the
# whole process, the final sync; the target removed between runs.  Printed:
# per case, medians, ratio to qemu-img's default (lower is better), the
# median CPU seconds of each tool (user + sys, bench/lib.sh: a shared
# machine disturbs them less than the wall) and the per-round ratios.
# QIMG_BEFORE=/path/to/qimg (a build before a change) adds that binary as
# one more tool, qimg-before, interleaved with the others (an A/B in the
# same rounds).
set -u
. "$(dirname "$0")/lib.sh"

ROUNDS=${ROUNDS:-3}
SIZE_GIB=${SIZE_GIB:-4}
CSIZE_GIB=${CSIZE_GIB:-1}
CASES=${CASES:-full-warm half-warm full-cold half-cold full-direct half-direct zlib zstd loop-raw loop-qcow2 luks-in luks-out luksfmt-in luksfmt-out from-vhdx from-vpc from-vdi to-vpc-fixed to-vhdx from-vmdk from-vmdk-stream from-vmdk-stream-warm to-vmdk-stream}
SEC=(--object secret,id=b0,data=bench)
QIMG_BEFORE=${QIMG_BEFORE:-}
cd "$BENCH_SCRATCH" || exit 1
bench_require_space $((SIZE_GIB * 6 + 2))

echo "# convert-bench: ${SIZE_GIB} GiB sources, $ROUNDS rounds, $(nproc) CPUs"
echo "# $("$QEMU_IMG" --version | head -n 1); $("$QIMG" --version | head -n 1)"
[ -n "$QIMG_BEFORE" ] && echo "# qimg-before: $QIMG_BEFORE"

python3 - "$SIZE_GIB" <<'PY'
import os, random, sys
size = int(sys.argv[1]) << 30
rng = random.Random(20261201)
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
head -c $((CSIZE_GIB << 30)) full.raw >c.raw
# what the copies write, as files of their own that floor-write and
# floor-both read from the page cache: full's bytes, half's data packed
case " $CASES " in *-cold* | *-direct* | *" loop-"*)
    cp full.raw wfull.raw
    python3 - <<'PY'
import os
fd = os.open('half.raw', os.O_RDONLY)
size = os.fstat(fd).st_size
with open('whalf.raw', 'wb') as out:
    off = 0
    while True:
        try:
            off = os.lseek(fd, off, os.SEEK_DATA)
        except OSError:
            break
        end = os.lseek(fd, off, os.SEEK_HOLE)
        while off < end:
            n = min(end - off, 8 << 20)
            out.write(os.pread(fd, n, off))
            off += n
PY
    ;;
esac
# the foreign formats' sources: 2 GiB of half.raw, in each format (qemu-img's)
HV_GIB=$((SIZE_GIB < 2 ? SIZE_GIB : 2))
case " $CASES " in *" from-"* | *" to-"*)
    head -c $((HV_GIB << 30)) half.raw >h2.raw
    for f in vhdx vpc vdi vmdk; do
        case " $CASES " in *" from-$f "*) "$QEMU_IMG" convert -f raw -O "$f" h2.raw "src.$f" ;; esac
    done
    case " $CASES " in *" from-vmdk-stream"*)
        "$QEMU_IMG" convert -f raw -O vmdk -o subformat=streamOptimized h2.raw src-stream.vmdk ;;
    esac ;;
esac
sync

drop_caches() {
    sync
    [ -w /proc/sys/vm/drop_caches ] && echo 3 >/proc/sys/vm/drop_caches
}

LOOP=
loop_setup() {
    [ -n "$LOOP" ] && return 0
    command -v losetup >/dev/null || return 1
    # room for the qcow2 metadata of a full source (-n -O qcow2)
    truncate -s $(((SIZE_GIB << 30) + (256 << 20))) loop.img || return 1
    LOOP=$(losetup -f --show loop.img 2>/dev/null) || { LOOP=; return 1; }
    trap 'losetup -d "$LOOP"; _bench_cleanup' EXIT
}

# The encrypted sources of luks-out and luksfmt-out, made once, untimed
# (qemu-img's key benchmark fails now and then: try again).
enc_source() {
    local f=$1 fmt=$2 o=$3
    [ -e "$f" ] && return 0
    for _ in 1 2 3 4 5 6 7 8; do
        "$QEMU_IMG" convert -f raw -O "$fmt" "${SEC[@]}" -o "$o" c.raw "$f" 2>/dev/null &&
            return 0
    done
    return 1
}

# run_case_luks CASE TOOL: sets BENCH_T
run_case_luks() {
    local c=$1 tool=$2 bin out args
    local qo=encrypt.format=luks,encrypt.key-secret=b0,encrypt.iter-time=10
    local lo=key-secret=b0,iter-time=10
    case $tool in
    qemu-img) bin=$QEMU_IMG ;;
    qemu-img-W16) bin=$QEMU_IMG args=(-W -m 16) ;;
    qimg) bin=$QIMG ;;
    qimg-before) bin=$QIMG_BEFORE ;;
    esac
    case $c in
    luks-in) out=dst.qcow2 args+=(-f raw -O qcow2 -o "$qo" c.raw) ;;
    luksfmt-in) out=dst.luks args+=(-f raw -O luks -o "$lo" c.raw) ;;
    luks-out)
        enc_source enc.qcow2 qcow2 "$qo" || return 1
        out=dst.raw args+=(--image-opts driver=qcow2,file.filename=enc.qcow2,encrypt.key-secret=b0
            -O raw) ;;
    luksfmt-out)
        enc_source enc.luks luks "$lo" || return 1
        out=dst.raw args+=(--image-opts driver=luks,file.filename=enc.luks,key-secret=b0 -O raw) ;;
    esac
    rm -f "$out"
    cat c.raw enc.qcow2 enc.luks >/dev/null 2>&1
    # qemu-img's PBKDF2 benchmark fails now and then ("Unable to get
    # accurate CPU usage"): a failed run is not timed, the next try is
    local t0 try
    for try in 1 2 3 4 5 6; do
        rm -f "$out"
        bench_warm
        t0=$EPOCHREALTIME
        if timeout "$BENCH_RUN_TIMEOUT" "$bin" convert "${SEC[@]}" "${args[@]}" "$out" \
            >/dev/null 2>&1; then
            sync
            BENCH_T=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }')
            break
        fi
        [ "$try" = 6 ] && { echo "failed: $bin convert ${args[*]}" >&2; exit 1; }
    done
    rm -f "$out"
    sync
}

# run_case CASE TOOL: sets BENCH_T
run_case() {
    case $1 in luks*) run_case_luks "$@"; return ;; esac
    local c=$1 tool=$2 src cold=0 args=() out=dst.qcow2 floor
    case $c in
    full-* | loop-*-full) src=full.raw ;;
    half-* | loop-*-half) src=half.raw ;;
    zlib | zstd) src=c.raw ;;
    from-vmdk-stream) src="src-stream.vmdk" cold=1 ;;
    from-vmdk-stream-warm) src="src-stream.vmdk" ;;
    from-*) src=src.${c#from-} cold=1 ;;
    to-*) src=h2.raw ;;
    esac
    local ifmt=raw
    case $c in from-vmdk*) ifmt=vmdk ;; from-*) ifmt=${c#from-} ;; esac
    case $c in
    *-cold) cold=1 ;;
    to-vmdk-stream) args=(-O vmdk -o subformat=streamOptimized) out=dst.vmdk ;;
    to-vpc-fixed) args=(-O vpc -o subformat=fixed) out=dst.vpc ;;
    to-vhdx) args=(-O vhdx) out=dst.vhdx ;;
    *-direct) cold=1 args=(-t none -T none) ;;
    zlib) args=(-c) ;;
    zstd) args=(-c -o compression_type=zstd) ;;
    loop-raw-*) cold=1 args=(-n -O raw) out=$LOOP ;;
    loop-qcow2-*) cold=1 args=(-n -O qcow2) out=$LOOP ;;
    esac
    case $c in loop-* | to-*) ;; *) args=(-O qcow2 "${args[@]}") ;; esac
    if [ "$c" = "${c#loop-qcow2}" ]; then :; else
        "$QEMU_IMG" create -q -f qcow2 "$LOOP" "${SIZE_GIB}G" # a fresh qcow2 on the device
    fi
    case $out in dst.*) rm -f "$out" ;; esac
    if [ $cold = 1 ]; then drop_caches; else cat "$src" >/dev/null; fi
    case $tool in
    qemu-img) bench_time BENCH_T "$QEMU_IMG" convert -f $ifmt "${args[@]}" "$src" "$out" ;;
    qemu-img-W16) bench_time BENCH_T "$QEMU_IMG" convert -f $ifmt -W -m 16 "${args[@]}" "$src" "$out" ;;
    qimg) bench_time BENCH_T "$QIMG" convert -f $ifmt "${args[@]}" "$src" "$out" ;;
    qimg-before) bench_time BENCH_T "$QIMG_BEFORE" convert -f $ifmt "${args[@]}" "$src" "$out" ;;
    floor)
        case $c in
        *-warm | to-*) bench_time BENCH_T cp --sparse=always "$src" floor.raw ;;
        *) bench_time BENCH_T dd if="$src" of=/dev/null bs=2M iflag=direct status=none ;;
        esac
        rm -f floor.raw ;;
    floor-cp) # from-*: the same data as a raw file (h2.raw), read cold and
        # written by cp (holes kept), the final sync timed
        drop_caches
        bench_time BENCH_T cp --sparse=always h2.raw floor.raw
        rm -f floor.raw ;;
    floor-write) # the bytes the copy writes, from the page cache, with O_DIRECT
        # (onto the device for loop-*)
        local fout=floor.raw wsrc=w${src}
        [ "$out" = dst.qcow2 ] || fout=$out
        cat "$wsrc" >/dev/null
        bench_time BENCH_T dd if="$wsrc" of="$fout" bs=2M oflag=direct conv=notrunc status=none
        rm -f floor.raw ;;
    floor-both) # the source read (cold) and those bytes written, at once
        local fout=floor.raw wsrc=w${src}
        [ "$out" = dst.qcow2 ] || fout=$out
        cat "$wsrc" >/dev/null
        both() {
            dd if="$src" of=/dev/null bs=2M iflag=direct status=none &
            dd if="$wsrc" of="$fout" bs=2M oflag=direct conv=notrunc status=none || return 1
            wait $! || return 1
        }
        bench_time BENCH_T both
        rm -f floor.raw ;;
    esac
    case $out in dst.*) rm -f "$out" ;; esac
    sync
}

for c in $CASES; do
    tools=(qemu-img qemu-img-W16 qimg)
    [ -n "$QIMG_BEFORE" ] && tools+=(qimg-before)
    case $c in
    *-warm) tools+=(floor) ;;
    *-cold | *-direct | loop-*) tools+=(floor floor-write floor-both) ;;
    from-*) tools+=(floor floor-cp) ;;
    to-*) tools+=(floor) ;;
    esac
    [ "$c" != "${c#luks}" ] && head -c $((CSIZE_GIB << 30)) full.raw >c.raw
    subcases=("$c")
    case $c in
    loop-*)
        loop_setup || { echo "# $c: skipped (no loop device)"; continue; }
        subcases=("$c-half" "$c-full") ;;
    esac
    for sc in "${subcases[@]}"; do
        ccase() { run_case "$sc" "$1"; }
        bench_rounds "$ROUNDS" ccase "${tools[@]}"
        bench_table "$sc" qemu-img "${tools[@]}"
        bench_reset
    done
done
