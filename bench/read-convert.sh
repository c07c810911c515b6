#!/bin/bash
# bench/read-convert.sh: the read path's performance bar.
#
#   "Converting a 4 GiB image with 50% data to raw is at least as fast as
#    qemu-img convert -O raw on the same image."
#
# Makes a 4 GiB qcow2 (64 KiB clusters, written by qemu-img convert) whose
# data is incompressible random bytes in extents of mixed sizes (64 KiB ..
# 4 MiB) alternating with unallocated extents of the same size, so exactly
# half the disk holds data.  Then ROUNDS rounds (default 5), each running,
# in a rotating order, with memwarm before each and a sync inside each
# timing, and the target removed (and synced) between runs:
#   qemu-img convert -O raw src.qcow2 dst.raw
#   qimg convert -O raw src.qcow2 dst.raw
#   floor: cp --sparse=always src.raw dst.raw (the same bytes as raw)
# and prints per-round times, medians and the ratio qimg/qemu-img (lower is
# better; <= 1.000 meets the bar).
#
# Environment: ROUNDS, QIMG, QEMU_IMG, BENCH_TMPDIR (scratch parent),
# MEMWARM_MIB (default 6144), SIZE_GIB (default 4).
set -u
. "$(dirname "$0")/read-lib.sh"

ROUNDS=${ROUNDS:-5}
SIZE_GIB=${SIZE_GIB:-4}
cd "$BENCH_SCRATCH" || exit 1

# src.raw (data half the size), src.qcow2 (the same), dst.raw (the same):
# about 1.5 x the size plus slack.
bench_require_space $((SIZE_GIB * 2 + 4))
echo "# disk: $(df -h --output=avail,target "$BENCH_SCRATCH" | tail -n 1)"

python3 - "$SIZE_GIB" <<'PY'
import os, random, sys
size = int(sys.argv[1]) << 30
rng = random.Random(4242)
pool = os.urandom(64 << 20)
sizes = [64 << 10, 128 << 10, 256 << 10, 1 << 20, 2 << 20, 4 << 20]
data = 0
with open('src.raw', 'wb') as f:
    f.truncate(size)
    off = 0
    while off < size:
        n = min(rng.choice(sizes), (size - off) // 2)
        if n <= 0:
            break
        p = rng.randrange(0, len(pool) - n, 4096)
        f.seek(off)
        f.write(pool[p:p + n])
        data += n
        off += 2 * n
print('# source: %d MiB of data in %d MiB (%.1f%%)' % (data >> 20, size >> 20, 100.0 * data / size))
PY
"$QEMU_IMG" convert -O qcow2 src.raw src.qcow2 || exit 1
sync
echo "# src.qcow2: $(du -h --apparent-size src.qcow2 | cut -f1) ($(du -h src.qcow2 | cut -f1) on disk)"

# Correctness first (not timed): qimg's output equals the source bytes.
"$QIMG" convert -O raw src.qcow2 dst.raw || exit 1
cmp src.raw dst.raw || { echo "qimg convert output differs from the source" >&2; exit 1; }
rm -f dst.raw
sync

run_qemu() { "$QEMU_IMG" convert -O raw src.qcow2 dst.raw; }
run_qimg() { "$QIMG" convert -O raw src.qcow2 dst.raw; }
run_floor() { cp --sparse=always src.raw dst.raw; }
cases=(qemu qimg floor)

declare -a T_qemu T_qimg T_floor
printf '%-6s %10s %10s %10s %14s %12s  %s\n' round qemu-img qimg floor qimg/qemu-img floor/qemu order
for r in $(seq 1 "$ROUNDS"); do
    # Rotate the order every round so no tool always runs first.
    order=()
    for i in 0 1 2; do
        order+=("${cases[$(((i + r - 1) % 3))]}")
    done
    for c in "${order[@]}"; do
        t=
        bench_warm
        bench_time t "run_$c"
        rm -f dst.raw
        sync
        eval "T_$c+=($t)"
    done
    i=$((r - 1))
    printf '%-6s %10s %10s %10s %14s %12s  %s\n' "$r" "${T_qemu[$i]}" "${T_qimg[$i]}" \
        "${T_floor[$i]}" "$(bench_ratio "${T_qimg[$i]}" "${T_qemu[$i]}")" \
        "$(bench_ratio "${T_floor[$i]}" "${T_qemu[$i]}")" "${order[*]}"
done
mq=$(bench_median "${T_qemu[@]}")
mm=$(bench_median "${T_qimg[@]}")
mf=$(bench_median "${T_floor[@]}")
printf '%-6s %10s %10s %10s %14s %12s\n' median "$mq" "$mm" "$mf" \
    "$(bench_ratio "$mm" "$mq")" "$(bench_ratio "$mf" "$mq")"
ratio=$(bench_ratio "$mm" "$mq")
if awk -v r="$ratio" 'BEGIN { exit !(r <= 1.0) }'; then
    echo "# bar met: qimg/qemu-img = $ratio (median), <= 1"
else
    echo "# bar NOT met: qimg/qemu-img = $ratio (median), > 1"
fi
