#!/bin/bash
# scripts/fuzz-long.sh [TARGET...]: `make fuzz`, the long fuzzing run.
#
# Runs each libFuzzer target of build-fuzz/fuzz (or the named ones) for
# QIMG_FUZZ_SECONDS (default 600) seconds with a random seed, using
# QIMG_FUZZ_JOBS (default 1) processes.  The corpus grows in
# build-fuzz/corpus/TARGET across runs (fuzz/seeds, or fuzz/seeds-FORMAT
# for fuzz-FORMAT, is read, never written); a crashing input lands in build-fuzz/artifacts/TARGET/.  To keep
# a crash as a regression input of `make test`, copy it to
# fuzz/regress/TARGET/ once it is fixed.
# Prints one line per target and "N passed, M failed"; exits 1 on a crash.
set -u
cd "$(dirname "$0")/.." || exit 1
seconds=${QIMG_FUZZ_SECONDS:-600}
jobs=${QIMG_FUZZ_JOBS:-1}
passed=0
failed=0

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    for exe in build-fuzz/fuzz/fuzz-*; do
        [ -f "$exe" ] && [ -x "$exe" ] && targets+=("$(basename "$exe")")
    done
fi
if [ ${#targets[@]} -eq 0 ]; then
    echo "no fuzz targets in build-fuzz/fuzz (run 'make build-fuzz')" >&2
    exit 1
fi

for name in "${targets[@]}"; do
    corpus=build-fuzz/corpus/$name
    artifacts=build-fuzz/artifacts/$name
    log=build-fuzz/$name.log
    mkdir -p "$corpus" "$artifacts"
    echo "fuzz $name: ${seconds}s, $jobs job(s), corpus $corpus"
    par=()
    if [ "$jobs" -gt 1 ]; then
        par=(-jobs="$jobs" -workers="$jobs") # logs in fuzz-N.log of build-fuzz/
    fi
    seeds=../fuzz/seeds # a target's own seeds in fuzz/seeds-FORMAT, if it has them
    [ -d "fuzz/seeds-${name#fuzz-}" ] && seeds=../fuzz/seeds-${name#fuzz-}
    # G_SLICE: plain malloc, as scripts/run-tests.sh runs them
    if (cd build-fuzz && G_SLICE=always-malloc "fuzz/$name" -max_total_time="$seconds" -rss_limit_mb=2048 \
        -timeout=10 "${par[@]+"${par[@]}"}" -artifact_prefix="artifacts/$name/" \
        "corpus/$name" "$seeds") >"$log" 2>&1; then
        passed=$((passed + 1))
        echo "fuzz $name: ok ($(grep -o 'Done [0-9]* runs' "$log" | tail -n 1))"
    else
        failed=$((failed + 1))
        tail -n 40 "$log"
        echo "FAILED: fuzz $name: crash input(s) in $artifacts/"
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
