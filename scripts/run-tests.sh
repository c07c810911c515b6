#!/usr/bin/env bash
# Run every suite of `make test` and end with one line "N passed, M failed".
#  1. unit tests (cmocka) in the normal build
#  2. the same unit tests in the ASan + UBSan build
#  3. the threaded unit tests in the TSan build
#  4. clang-format --dry-run on every C file
#  5. iotests (build/qimg against qemu-img / qemu-io)
#  6. each fuzz target for a short time on its seeds (fixed seed)
set -uo pipefail
cd "$(dirname "$0")/.."

passed=0
failed=0
skipped=0
failures=()

count_meson() { # build-dir label
    local dir=$1 label=$2 log
    log=$(mktemp)
    meson test -C "$dir" --suite unit --print-errorlogs --num-processes 2 >"$log" 2>&1
    local ok fail skip to
    ok=$(awk '/^Ok:/ {print $2}' "$log")
    fail=$(awk '/^Fail:/ {print $2}' "$log")
    to=$(awk '/^Timeout:/ {print $2}' "$log")
    skip=$(awk '/^Skipped:/ {print $2}' "$log")
    if [ -z "$ok" ]; then
        cat "$log"
        failed=$((failed + 1)); failures+=("$label: meson test did not run")
    else
        passed=$((passed + ok)); failed=$((failed + fail + to)); skipped=$((skipped + skip))
        if [ $((fail + to)) -ne 0 ]; then
            grep -E '^ *[0-9]+/[0-9]+ .*(FAIL|TIMEOUT)' "$log" | sed "s/^/$label: /"
            sed -n '/Listing only the last/,/^==/p' "$log" | tail -60
            failures+=("$label: $((fail + to)) failed")
        fi
    fi
    echo "$label: ${ok:-0} ok, ${fail:-?} failed, ${skip:-0} skipped"
    rm -f "$log"
}

count_meson build unit
count_meson build-asan unit-asan

# TSan: the tests that exercise threads.
tsan_tests=$(cd build-tsan/tests 2>/dev/null && for f in test-*thread* test-vmstate; do
    [ -f "$f" ] && echo "$f"; done)
for t in test-pool test-file $tsan_tests; do
    exe=build-tsan/tests/$t
    [ -x "$exe" ] || continue
    if TSAN_OPTIONS=halt_on_error=1 QIMG_TEST_TMPDIR=$(mktemp -d) "$exe" >/tmp/tsan-$t.log 2>&1; then
        passed=$((passed + 1)); echo "tsan $t: ok"
    else
        failed=$((failed + 1)); failures+=("tsan: $t"); tail -40 /tmp/tsan-$t.log
    fi
done

# Style: every C file as .clang-format wants it (clang-format is on the
# Debian base; when missing the step is skipped, not passed).
if command -v clang-format >/dev/null; then
    unformatted=$(git ls-files '*.c' '*.h' 2>/dev/null | while read -r f; do
        clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || echo "$f"; done)
    if [ -z "$unformatted" ]; then
        passed=$((passed + 1)); echo "clang-format: ok"
    else
        failed=$((failed + 1)); failures+=("clang-format: $(echo $unformatted)")
        echo "clang-format: not formatted: $(echo $unformatted) (run clang-format -i)"
    fi
else
    skipped=$((skipped + 1)); echo "clang-format: skipped (not installed)"
fi

# iotests
log=$(mktemp)
QIMG=$PWD/build/tools/qimg iotests/run >"$log" 2>&1
# a failure's own output follows its FAIL line, indented
awk '/^(PASS|SKIP)/ {show = 0} /^SKIP/ {print} /^FAIL/ {show = 1} show' "$log" | head -300
line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
if [ -n "$line" ]; then
    p=$(echo "$line" | awk '{print $1}'); f=$(echo "$line" | awk '{print $3}')
    s=$(echo "$line" | sed -n 's/.*, \([0-9]*\) skipped.*/\1/p')
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + ${s:-0}))
    [ "$f" -ne 0 ] && failures+=("iotests: $f failed")
    echo "iotests: $line"
else
    cat "$log"; failed=$((failed + 1)); failures+=("iotests: runner failed")
fi
rm -f "$log"

# Fuzz targets, briefly.
if [ -d build-fuzz/fuzz ]; then
    for exe in build-fuzz/fuzz/fuzz-*; do
        [ -f "$exe" ] && [ -x "$exe" ] || continue
        name=$(basename "$exe")
        seeds=fuzz/seeds
        corpus=$(mktemp -d)
        # Fixed seed: CI explores the same inputs every time (random, long
        # runs are `make fuzz`); fuzz/regress/NAME holds fixed crashes.
        regress=()
        [ -d "fuzz/regress/$name" ] && regress=("fuzz/regress/$name")
        if "$exe" -seed=1 -max_total_time="${QIMG_FUZZ_SECONDS:-20}" -rss_limit_mb=2048 \
              -timeout=10 -artifact_prefix="$corpus/" "$corpus" "$seeds" \
              "${regress[@]+"${regress[@]}"}" >/tmp/$name.log 2>&1; then
            passed=$((passed + 1)); echo "fuzz $name: ok ($(grep -o 'Done [0-9]* runs' /tmp/$name.log))"
        else
            failed=$((failed + 1)); failures+=("fuzz: $name"); tail -40 /tmp/$name.log
            for crash in "$corpus"/crash-* "$corpus"/timeout-* "$corpus"/oom-*; do
                [ -f "$crash" ] || continue # the input, to reproduce it elsewhere
                echo "$(basename "$crash") (gzip | base64):"
                gzip -9c "$crash" | base64 | head -c 65536; echo
            done
        fi
        rm -rf "$corpus"
    done
fi

for f in "${failures[@]+"${failures[@]}"}"; do echo "FAILED: $f"; done
if [ "$skipped" -gt 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped"
else
    echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]
