#!/bin/bash
# bench/chain-bench.sh: backing-chain commands (issue 14's performance
# list) -- qimg and qemu-img on the same work in one run.
#
# The chain (SIZE_GIB, default 4): base.qcow2 fully allocated with
# incompressible data; top.qcow2 over it with 25% of its clusters changed
# (extents of 64 KiB .. 1 MiB); new.qcow2, a copy of the base with another
# 25% changed.  Cases (CASES selects; tools interleaved, ROUNDS rounds,
# default 3; the chain copied afresh and caches dropped before every run,
# the final sync timed):
#   commit   TOOL commit top.qcow2 (into the base, top emptied)
#   rebase   TOOL rebase -b new.qcow2 -F qcow2 top.qcow2 (safe mode: the
#            unallocated 75% of both backings compared, differences copied)
set -u
. "$(dirname "$0")/lib.sh"

ROUNDS=${ROUNDS:-3}
QEMU_IO=${QEMU_IO:-qemu-io}
SIZE_GIB=${SIZE_GIB:-4}
CASES=${CASES:-commit rebase}
cd "$BENCH_SCRATCH" || exit 1
bench_require_space $((SIZE_GIB * 7 + 2))

echo "# chain-bench: ${SIZE_GIB} GiB, 25% changed, $ROUNDS rounds, $(nproc) CPUs"
echo "# $("$QEMU_IMG" --version | head -n 1); $("$QIMG" --version | head -n 1)"

python3 - "$SIZE_GIB" <<'PY'
import os, random, sys
size = int(sys.argv[1]) << 30
pool = os.urandom(64 << 20)
with open("base.raw", "wb") as f:
    for off in range(0, size, len(pool)):
        f.write(pool[:min(len(pool), size - off)])
for name, seed in (("top.cmds", 1), ("new.cmds", 2)):
    rng = random.Random(seed)
    sizes = [64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20]
    done, cmds = 0, []
    while done < size // 4:
        n = rng.choice(sizes)
        off = rng.randrange(0, size - n, 64 << 10)
        cmds.append("write -P %d %d %d" % (rng.randrange(1, 255), off, n))
        done += n
    open(name, "w").write("\n".join(cmds) + "\n")
PY
"$QEMU_IMG" convert -f raw -O qcow2 base.raw base0.qcow2
rm -f base.raw
cp base0.qcow2 new0.qcow2
"$QEMU_IO" new0.qcow2 <new.cmds >/dev/null
cp base0.qcow2 base.qcow2
"$QEMU_IMG" create -q -f qcow2 -b base.qcow2 -F qcow2 top0.qcow2
"$QEMU_IO" top0.qcow2 <top.cmds >/dev/null
sync

drop_caches() {
    sync
    [ -w /proc/sys/vm/drop_caches ] && echo 3 >/proc/sys/vm/drop_caches
}

run_case() { # CASE TOOL: sets BENCH_T
    local c=$1 tool=$2 bin
    bin=$QEMU_IMG
    [ "$tool" = qimg ] && bin=$QIMG
    cp base0.qcow2 base.qcow2
    cp top0.qcow2 top.qcow2
    [ "$c" = rebase ] && cp new0.qcow2 new.qcow2
    drop_caches
    case $c in
    commit) bench_time BENCH_T "$bin" commit -q top.qcow2 ;;
    rebase) bench_time BENCH_T "$bin" rebase -q -b new.qcow2 -F qcow2 top.qcow2 ;;
    esac
}

for c in $CASES; do
    case $c in
    commit | rebase) ;;
    *) echo "unknown case $c" >&2; exit 1 ;;
    esac
    ncase() { run_case "$c" "$1"; }
    bench_rounds "$ROUNDS" ncase qemu-img qimg
    bench_table "$c" qemu-img qemu-img qimg
    bench_reset
done
