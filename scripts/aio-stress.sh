#!/usr/bin/env bash
# The randomized asynchronous workloads of tests/test-aio-workload.c, many
# times (issue 31): every round runs its five configurations (64k clusters,
# 4k clusters with lazy refcounts, extended L2, and the io_uring engine with
# cache=none, 64k and extended L2) with a new seed, once as make test's
# contended run (no two requests on one block) and once with reads beside
# writes, zero writes and discards of their blocks (workload rule 3),
# alternately on a 2 MiB image (requests meet in the same clusters all the
# time) and a 32 MiB one, with MALLOC_PERTURB_ set on every other pair of
# rounds.  Each failing run's output (the read's history) is kept.
#
#   scripts/aio-stress.sh [ROUNDS]     (default 50: 500 workload runs)
#
# A skip counts as a failure (CI=true: the nbdkit plugin must be built).
# Environment: BUILD (default build), AIO_STRESS_LOG (default
# build/aio-stress: the logs of failing runs), AIO_STRESS_REQUESTS
# (requests per workload on the 2 MiB image, default 8000).
# Prints one line per failure and, last, "aio-stress: N workload runs, F
# failed, in S s"; exits 1 if any failed.
set -u
cd "$(dirname "$0")/.."
rounds=${1:-50}
build=${BUILD:-build}
exe=$build/tests/test-aio-workload
logdir=${AIO_STRESS_LOG:-$build/aio-stress}
[ -x "$exe" ] || { echo "aio-stress: $exe not built (make build)" >&2; exit 1; }
build=$(cd "$build" && pwd)
mkdir -p "$logdir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
runs=0 failed=0
for ((i = 1; i <= rounds; i++)); do
    seed=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
    env=(QIMG_TEST_SEED=$seed QIMG_TEST_TMPDIR=$tmp CI=true
         QIMG_TEST_FILTER=test_workload_contended,test_workload_overlap*)
    if ((i % 2)); then
        env+=(QIMG_TEST_AIO_MIB=2 QIMG_TEST_AIO_REQUESTS=${AIO_STRESS_REQUESTS:-8000})
        what="2 MiB"
    else
        env+=(QIMG_TEST_AIO_MIB=32 QIMG_TEST_AIO_REQUESTS=6000)
        what="32 MiB"
    fi
    if (((i / 2) % 2)); then
        env+=(MALLOC_PERTURB_=$((RANDOM % 255 + 1)))
    fi
    if env "${env[@]}" "$exe" >"$tmp/out" 2>&1; then
        :
    else
        failed=$((failed + 1))
        cp "$tmp/out" "$logdir/fail-$seed.log"
        echo "aio-stress: round $i ($what, seed $seed) failed: $logdir/fail-$seed.log"
        grep -m3 -E 'first:|differs|ERROR' "$tmp/out" | sed 's/^/    /'
    fi
    runs=$((runs + 10))
done
echo "aio-stress: $runs workload runs, $failed failed, in $(($(date +%s) - start)) s"
[ "$failed" -eq 0 ]
