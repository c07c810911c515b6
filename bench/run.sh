#!/bin/bash
# bench/run.sh [NAME...]: run the benchmarks (bench/<NAME>.sh), one after
# the other, and print their tables.  Without NAME: every script listed in
# BENCHES below that exists.  Exit status: 1 if any benchmark failed.
#
# Each benchmark interleaves qimg, qemu-img and the floor in rounds, warms
# memory before every timed run and times the final sync (see bench/lib.sh);
# ROUNDS, DEPTH, CACHE and the size variables of each script pass through.
BENCH_DIR=$(cd "$(dirname "$0")" && pwd)
BENCHES=(write-bench io-bench read-convert convert-bench vmstate-bench nbd-bench chain-bench rbd-bench)

if [ $# -gt 0 ]; then
    BENCHES=("$@")
fi
failed=0
for b in "${BENCHES[@]}"; do
    script=$BENCH_DIR/${b%.sh}.sh
    if [ ! -x "$script" ] && [ ! -f "$script" ]; then
        [ $# -gt 0 ] && { echo "no such benchmark: $b" >&2; failed=1; }
        continue
    fi
    echo "=== $b ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
    if ! bash "$script"; then
        echo "=== $b FAILED"
        failed=1
    fi
    echo
done
exit $failed
