#!/bin/bash
# bench/vmstate-bench.sh: the vmstate writer's and reader's performance bars.
#
#   save: >= 0.95 x the speed of dd to a plain file (page cache and
#         cache=none), and >= 3 x QEMU 7.2's savevm with cache=none;
#   load: >= 0.95 x the speed of a sequential read of the same bytes.
#
# The state: SIZE_MIB (default 1024) of random bytes (ram.bin), made once.
# Save, in each cache mode (writeback = page cache; none = O_DIRECT), each
# round running the cases in a rotating order, every one onto a fresh
# 64 MiB qcow2 (or plain file), memwarm right before it, timed with its
# final flush and a sync:
#   (a) qimg vmstate save [-t none] --qemu-shaped SEED IMG s ram.bin
#       (the file replayed as QEMU's migration buffer flushes arrive: a
#       fixed, seeded sequence of pieces of 1 byte .. 32 KiB), buffered
#       writer with its defaults;
#   (b) the same with --unbuffered (one cluster-sized buffer, one write in
#       flight: the public API has no pass-through mode);
#   (c) QEMU 7.2 savevm over QMP of a paused VM whose SIZE_MIB of RAM is a
#       private mapping of ram.bin (bench/qemu-savevm.sh; -drive
#       cache=writeback|none), when qemu-system-x86_64 exists; its stream is
#       slightly larger (page headers, devices): see the sizes printed;
#   (d) the floor: dd if=ram.bin of=plain bs=4M conv=fdatasync
#       [oflag=direct];
#   (e) with QIMG_BEFORE=binary (a qimg built before a change): (a) with
#       that binary.
# Load, cold (page cache dropped before each run where permitted), from the
# images (a) and (c) of the same round:
#   qimg vmstate load [-t none] IMG s /dev/null (read-ahead, 1 MiB reads);
#   the same with QIMG_BEFORE, when given (of the same image (a));
#   the same with --chunk-size 32k (the reads of QEMU's loadvm buffer);
#   the floor: dd if=ram.bin of=/dev/null bs=4M [iflag=direct];
#   QEMU loadvm over QMP (anonymous RAM of the same size).
# Prints per-round times, medians, the median CPU seconds (user + sys) of
# each qimg and dd case, per-round ratios and the goals.
#
# Environment: ROUNDS (5), SIZE_MIB (1024), SEED (1), MEMWARM_MIB (6144),
# BENCH_TMPDIR (scratch parent; default bench/), QIMG, QIMG_BEFORE, QEMU_IMG,
# QEMU_SYSTEM, SKIP_QEMU=1, SKIP_UNBUFFERED=1, MODES ("writeback none").
set -u
. "$(dirname "$0")/vmstate-lib.sh"

ROUNDS=${ROUNDS:-5}
SIZE_MIB=${SIZE_MIB:-1024}
SEED=${SEED:-1}
MODES=${MODES:-"writeback none"}
QEMU_SYSTEM=${QEMU_SYSTEM:-qemu-system-x86_64}
SAVEVM=$VM_BENCH_DIR/qemu-savevm.sh
export QEMU_SYSTEM

[ -x "$QIMG" ] || { echo "qimg not built: $QIMG" >&2; exit 1; }
QIMG_BEFORE=${QIMG_BEFORE:-}
[ -z "$QIMG_BEFORE" ] || [ -x "$QIMG_BEFORE" ] ||
    { echo "QIMG_BEFORE is not executable: $QIMG_BEFORE" >&2; exit 1; }
have_qemu=1
if [ -n "${SKIP_QEMU:-}" ] || ! command -v "$QEMU_SYSTEM" >/dev/null; then
    have_qemu=
fi

vm_scratch_init
cd "$BENCH_SCRATCH" || exit 1
# ram.bin, image (a), image (c), one more image or plain file, slack.
vm_require_space $(((SIZE_MIB * 4 + 1023) / 1024 + 2))
t_start=$EPOCHREALTIME

echo "# vmstate bench: ${SIZE_MIB} MiB state, $ROUNDS rounds, modes: $MODES"
echo "# qimg: $QIMG"
[ -n "$QIMG_BEFORE" ] && echo "# qimg-before: $QIMG_BEFORE"
echo "# disk: $(df -h --output=source,avail "$BENCH_SCRATCH" | tail -n 1)"
[ -n "$have_qemu" ] && echo "# qemu: $("$QEMU_SYSTEM" --version | head -n 1)"
head -c $((SIZE_MIB << 20)) /dev/urandom >ram.bin

cases_save=(a b c d)
[ -n "${SKIP_UNBUFFERED:-}" ] && cases_save=(a c d)
[ -z "$have_qemu" ] && cases_save=("${cases_save[@]/c/}")
cases_load=(q s f v)
[ -z "$have_qemu" ] && cases_load=(q s f)
if [ -n "$QIMG_BEFORE" ]; then
    cases_save+=(e)
    cases_load+=(p)
fi
declare -A T      # T[phase/mode/case/round] = seconds
declare -A C      # C[phase/mode/case/round] = CPU seconds (qimg and dd cases)
declare -A SIZES  # bytes of each case's stream
cache_opt() { [ "$1" = none ] && echo "-t none"; }

new_image() {
    rm -f "$1"
    "$QEMU_IMG" create -q -f qcow2 "$1" 64M || exit 1
}

vm_state_size() {
    "$QEMU_IMG" info -U --output=json "$1" | python3 -c '
import json, sys
print(json.load(sys.stdin)["snapshots"][0]["vm-state-size"])'
}

# save_case MODE CASE ROUND
save_case() {
    local mode=$1 c=$2 r=$3 t img
    VM_C=-
    local dd_direct=
    [ "$mode" = none ] && dd_direct=oflag=direct
    case $c in
    a | b | e)
        local q=$QIMG
        [ "$c" = e ] && q=$QIMG_BEFORE
        img=save-$c.qcow2
        new_image "$img"
        sync
        vm_warm
        # shellcheck disable=SC2046
        vm_time t "$q" vmstate save $(cache_opt "$mode") \
            $([ "$c" = b ] && echo --unbuffered) --qemu-shaped "$SEED" "$img" s ram.bin
        SIZES[$c]=$(vm_state_size "$img")
        ;;
    c)
        img=save-c.qcow2
        new_image "$img"
        sync
        t=$("$SAVEVM" --cache "$mode" --ram-file ram.bin --before "$MEMWARM $MEMWARM_MIB >/dev/null" \
            save "$img" s) || exit 1
        SIZES[c]=$(vm_state_size "$img")
        ;;
    d)
        rm -f plain.out
        sync
        vm_warm
        vm_time t dd if=ram.bin of=plain.out bs=4M conv=fdatasync $dd_direct status=none
        SIZES[d]=$(stat -c %s plain.out)
        rm -f plain.out
        ;;
    esac
    # Only the images the loads need stay.
    [ "$c" = b ] || [ "$c" = e ] && rm -f "save-$c.qcow2"
    T[save/$mode/$c/$r]=$t
    C[save/$mode/$c/$r]=$VM_C
}

# load_case MODE CASE ROUND
load_case() {
    local mode=$1 c=$2 r=$3 t
    VM_C=-
    local direct=
    [ "$mode" = none ] && direct=iflag=direct
    case $c in
    q | p)
        local bin=$QIMG
        [ "$c" = p ] && bin=$QIMG_BEFORE
        vm_drop_caches
        vm_warm
        # shellcheck disable=SC2046
        vm_time t "$bin" vmstate load $(cache_opt "$mode") save-a.qcow2 s /dev/null
        ;;
    s)
        vm_drop_caches
        vm_warm
        # shellcheck disable=SC2046
        vm_time t "$QIMG" vmstate load $(cache_opt "$mode") --chunk-size 32k save-a.qcow2 s \
            /dev/null
        ;;
    f)
        vm_drop_caches
        vm_warm
        vm_time t dd if=ram.bin of=/dev/null bs=4M $direct status=none
        ;;
    v)
        t=$("$SAVEVM" --cache "$mode" --ram-size "${SIZE_MIB}M" \
            --before "sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; $MEMWARM $MEMWARM_MIB >/dev/null" \
            load save-c.qcow2 s) || exit 1
        ;;
    esac
    T[load/$mode/$c/$r]=$t
    C[load/$mode/$c/$r]=$VM_C
}

# rotate N WORDS...: the words rotated left by N.
rotate() {
    local n=$1
    shift
    local a=("$@") i out=()
    for ((i = 0; i < ${#a[@]}; i++)); do
        out+=("${a[$(((i + n) % ${#a[@]}))]}")
    done
    echo "${out[@]}"
}

for ((r = 1; r <= ROUNDS; r++)); do
    for mode in $MODES; do
        cat ram.bin >/dev/null # the source is in the page cache for every save
        for c in $(rotate $((r - 1)) "${cases_save[@]}"); do
            [ -n "$c" ] && save_case "$mode" "$c" "$r"
        done
        for c in $(rotate $((r - 1)) "${cases_load[@]}"); do
            load_case "$mode" "$c" "$r"
        done
        rm -f save-a.qcow2 save-c.qcow2
    done
    printf '# round %d done (%.0f s so far)\n' "$r" \
        "$(awk -v a="$t_start" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')"
done

# ---- report ----
name_of() {
    case $1 in
    a) echo "qimg vmstate save (buffered)" ;;
    b) echo "qimg vmstate save --unbuffered" ;;
    c) echo "QEMU 7.2 savevm" ;;
    d) echo "dd conv=fdatasync (floor)" ;;
    e) echo "qimg-before vmstate save (buffered)" ;;
    q) echo "qimg vmstate load (read-ahead)" ;;
    p) echo "qimg-before vmstate load" ;;
    s) echo "qimg vmstate load, 32 KiB reads" ;;
    f) echo "dd sequential read (floor)" ;;
    v) echo "QEMU 7.2 loadvm" ;;
    esac
}

row_times() { # phase mode case -> "t1 t2 ..."
    local r out=()
    for ((r = 1; r <= ROUNDS; r++)); do
        out+=("${T[$1/$2/$3/$r]:--}")
    done
    echo "${out[@]}"
}

row_cpu() { # phase mode case -> median CPU seconds, or - (not measured)
    local r out=()
    for ((r = 1; r <= ROUNDS; r++)); do
        [ "${C[$1/$2/$3/$r]:--}" = - ] || out+=("${C[$1/$2/$3/$r]}")
    done
    if ((${#out[@]})); then vm_median "${out[@]}"; else echo -; fi
}

# speed ratio "x vs y" per round: time(y) / time(x)  (>1: x is faster)
round_ratios() {
    local r out=()
    for ((r = 1; r <= ROUNDS; r++)); do
        out+=("$(vm_ratio "${T[$1/$2/$4/$r]:--}" "${T[$1/$2/$3/$r]:--}")")
    done
    echo "${out[@]}"
}

declare -A MED
echo
echo "state sizes (bytes): qimg ${SIZES[a]:-?}, dd ${SIZES[d]:-?}${SIZES[c]:+, QEMU ${SIZES[c]}}"
printf '\n%-6s %-10s %-34s %8s %8s %6s   %s\n' phase cache case median MiB/s "cpu s" "per-round seconds"
for phase in save load; do
    if [ "$phase" = save ]; then cs=(a e b c d); else cs=(q p s f v); fi
    for mode in $MODES; do
        for c in "${cs[@]}"; do
            [ -n "${T[$phase/$mode/$c/1]:-}" ] || continue
            # shellcheck disable=SC2046
            m=$(vm_median $(row_times "$phase" "$mode" "$c"))
            MED[$phase/$mode/$c]=$m
            sz=${SIZES[$c]:-$((SIZE_MIB << 20))}
            [ "$phase" = load ] && sz=${SIZES[a]:-$((SIZE_MIB << 20))}
            [ "$c" = v ] && sz=${SIZES[c]:-0}
            [ "$c" = f ] && sz=$((SIZE_MIB << 20))
            mibs=$(awk -v s="$sz" -v t="$m" 'BEGIN { if (t > 0) printf "%.0f", s / 1048576 / t; else print "-" }')
            printf '%-6s %-10s %-34s %8s %8s %6s   %s\n' "$phase" "$mode" "$(name_of "$c")" "$m" \
                "$mibs" "$(row_cpu "$phase" "$mode" "$c")" "$(row_times "$phase" "$mode" "$c")"
        done
    done
done

echo
echo "goals (speed ratios; per round, then from the medians):"
goal() { # desc phase mode x y min
    local desc=$1 phase=$2 mode=$3 x=$4 y=$5 min=$6 med verdict
    [ -n "${MED[$phase/$mode/$x]:-}" ] && [ -n "${MED[$phase/$mode/$y]:-}" ] || return 0
    med=$(vm_ratio "${MED[$phase/$mode/$y]}" "${MED[$phase/$mode/$x]}")
    verdict=$(awk -v a="$med" -v b="$min" 'BEGIN { print (a >= b) ? "met" : "MISSED" }')
    if [ "$min" = 0 ]; then
        printf '  %-48s %-28s median %5s\n' "$desc" "$(round_ratios "$phase" "$mode" "$x" "$y")" "$med"
    else
        printf '  %-48s %-28s median %5s  (goal >= %s: %s)\n' "$desc" \
            "$(round_ratios "$phase" "$mode" "$x" "$y")" "$med" "$min" "$verdict"
    fi
}
for mode in $MODES; do
    goal "save $mode: qimg vs dd floor" save "$mode" a d 0.95
    goal "save $mode: qimg-before vs dd floor" save "$mode" e d 0.95
done
goal "save none: qimg vs QEMU savevm" save none a c 3
for mode in $MODES; do
    goal "load $mode: qimg vs sequential read" load "$mode" q f 0.95
    goal "load $mode: qimg-before vs sequential read" load "$mode" p f 0.95
done
echo "for information (no goal):"
for mode in $MODES; do
    [ "$mode" = none ] || goal "save $mode: qimg vs QEMU savevm" save "$mode" a c 0
    goal "save $mode: qimg unbuffered vs dd floor" save "$mode" b d 0
    goal "save $mode: qimg unbuffered vs QEMU" save "$mode" b c 0
    goal "load $mode: qimg vs QEMU loadvm" load "$mode" q v 0
    goal "load $mode: qimg 32 KiB reads vs sequential read" load "$mode" s f 0
done
printf '\n# total %.0f s\n' "$(awk -v a="$t_start" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')"
