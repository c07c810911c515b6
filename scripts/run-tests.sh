#!/usr/bin/env bash
# Run every suite of `make test` and end with one line
# "N passed, M failed, K skipped" (always all three counts).
#  1. unit tests (cmocka) in the ASan + UBSan build: the same programs as
#     the normal build's, with more checked; running both cost ~2.5 min of
#     the 20-minute budget (make check-long runs the normal build's)
#  2. the threaded unit tests in the TSan build, built and run at nice 10
#     in the background from the start (with step 5), in the time the
#     other steps leave idle: the unit tests and iotests run two at a
#     time, and the iotests wait on servers, syncs and sleeps for about a
#     sixth of theirs; built before them, build-tsan and build-fuzz cost
#     ~60 s of make test's wall time, their tests ~70 s more after the
#     unit tests (stop 52: CI 1214 s of a 1200 s budget)
#  3. clang-format --dry-run on every C file, the layering rule
#     (scripts/check-layers.sh: no #include runs upward), the ABI
#     (scripts/check-abi.sh: headers = exports = libqimg.map, one version
#     node) and an embedder's build against the installed library
#     (scripts/check-install.sh: examples/embed.c via pkg-config)
#  4. iotests (build/qimg against qemu-img / qemu-io)
#  5. each fuzz target for a short time on its seeds (fixed seed), one at
#     a time, after the TSan programs in the same background chain
#     (step 2): build-tsan, its tests, build-fuzz, the targets
#
# Accounting: nothing that did not run counts as passed, and nothing
# disappears.  A unit-test program that exits 77 (a test in it skipped), a
# skipped iotest, and an environment limit count as skipped; a missing
# build folder, TSan binary, fuzz target or clang-format counts as skipped,
# and with CI=true (the CI, .ci/run) as failed: CI must run everything.
# Before the last line, "SKIPPED: step: why" lists every skip and
# "FAILED: step: why" every failure.
set -uo pipefail
cd "$(dirname "$0")/.."

passed=0
failed=0
skipped=0
failures=()
skips=()

in_ci() {
    case "${CI:-}" in
    true | TRUE | True | 1) return 0 ;;
    *) return 1 ;;
    esac
}

# skip_step LABEL WHY: LABEL did not run for a reason of its environment.
skip_step() {
    skipped=$((skipped + 1))
    skips+=("$1: $2")
    echo "$1: skipped ($2)"
}

# missing_step LABEL WHY: LABEL could not run because something it needs was
# not built or installed: skipped, or failed under CI.
missing_step() {
    if in_ci; then
        failed=$((failed + 1))
        failures+=("$1: $2 (CI=true: nothing may be skipped)")
        echo "$1: FAILED: $2 (CI=true: nothing may be skipped)"
    else
        skip_step "$1" "$2"
    fi
}

# meson_why BUILD-DIR LABEL skip|fail: from meson's testlog.json, one line
# "LABEL: NAME: why" per meson test that was skipped (the "SKIP test: why"
# lines test-util prints, counted), or up to four per test that failed
# (cmocka's failed test and its message, a sanitizer's report: they go on
# the FAILED lines at the end, which are what CI keeps of a long output).
meson_why() {
    python3 - "$1/meson-logs/testlog.json" "$2" "$3" <<'EOF'
import collections, json, re, sys
path, label, mode = sys.argv[1:4]
try:
    entries = [json.loads(line) for line in open(path)]
except (OSError, ValueError) as e:
    print('%s: (no %s reasons: %s)' % (label, mode, e))
    sys.exit(0)
results = ('SKIP',) if mode == 'skip' else ('FAIL', 'TIMEOUT', 'UNEXPECTEDPASS', 'ERROR')
fail_why = re.compile(r'\[  (FAILED|ERROR) +\]|error:|ERROR: |runtime error|'
                      r'Sanitizer|Assertion|Test failed|timed out|TIMEOUT')
for e in entries:
    if e.get('result') not in results:
        continue
    why = collections.Counter()
    for stream in ('stdout', 'stderr'):
        for line in (e.get(stream) or '').splitlines():
            if mode == 'skip' and line.startswith('SKIP ') and ': ' in line:
                why[line.split(': ', 1)[1]] += 1
            elif mode == 'fail' and fail_why.search(line):
                why[line.strip()[:240]] += 1
    if mode == 'skip':
        text = '; '.join('%d test(s): %s' % (n, w) for w, n in why.items())
        print('%s: %s: %s' % (label, e['name'], text or 'exit 77, no reason printed'))
    else:
        for w in list(why)[:4] or ['%s, no reason printed' % e.get('result')]:
            print('%s: %s: %s' % (label, e['name'], w))
EOF
}

# timed LABEL: how long the step since the last call took, kept for the
# "times:" line at the end (the 20-minute budget of make test, README).
# With the CPU seconds of what the step ran (user + system): what it costs
# a quiet machine, whatever the load of this one.
times=()
t_last=$SECONDS
cpu_last=0
children_cpu() { # sets cpu_now (not a command substitution: a subshell
    local f           # would count nothing)
    f=$(mktemp)
    times >"$f"
    cpu_now=$(awk 'NR == 2 {
        n = split($1 " " $2, t, " "); s = 0
        for (k = 1; k <= n; k++) { split(t[k], ms, "m"); s += ms[1] * 60 + ms[2] }
        printf "%d\n", s + 0.5 }' "$f")
    rm -f "$f"
}
timed() {
    children_cpu
    times+=("$1 $((SECONDS - t_last))s (cpu $((cpu_now - cpu_last))s)")
    t_last=$SECONDS
    cpu_last=$cpu_now
}

count_meson() { # build-dir label
    local dir=$1 label=$2 log
    if [ ! -f "$dir/build.ninja" ]; then
        missing_step "$label" "$dir is not configured (make $dir)"
        return
    fi
    log=$(mktemp)
    # a timeout is there to catch a hang: the sanitizer build's tests run
    # several times slower, so theirs is three times as long
    local mult=1 asan=${ASAN_OPTIONS:-}
    if [ "$dir" = build-asan ]; then
        mult=3
        # ASan keeps 256 MB of freed memory poisoned by default, so nearly
        # every allocation of these I/O-heavy programs faults in fresh
        # pages, which this machine kind (a PVM guest) makes expensive:
        # test-qcow2-read 48.6 s of CPU, 35.2 s with 16 MB (write-features
        # 32.7 -> 20.7).  A use after free is still caught while the memory
        # is among the last 16 MB freed; a later one goes unseen (the
        # caller's ASAN_OPTIONS come after, and win).
        asan=quarantine_size_mb=16${asan:+:$asan}
    fi
    ASAN_OPTIONS=$asan meson test -C "$dir" --suite unit --print-errorlogs --num-processes 2 \
        --timeout-multiplier "$mult" >"$log" 2>&1
    local ok fail skip to xfail xpass
    ok=$(awk '/^Ok:/ {print $2}' "$log")
    xfail=$(awk '/^Expected Fail:/ {print $3}' "$log")
    fail=$(awk '/^Fail:/ {print $2}' "$log")
    xpass=$(awk '/^Unexpected Pass:/ {print $3}' "$log")
    to=$(awk '/^Timeout:/ {print $2}' "$log")
    skip=$(awk '/^Skipped:/ {print $2}' "$log")
    if [ -z "$ok" ] || [ -z "$fail" ] || [ -z "$skip" ]; then
        cat "$log"
        failed=$((failed + 1)); failures+=("$label: meson test did not run")
        echo "$label: meson test did not run"
        rm -f "$log"
        return
    fi
    local bad=$((fail + ${xpass:-0} + ${to:-0}))
    passed=$((passed + ok + ${xfail:-0})); failed=$((failed + bad))
    skipped=$((skipped + skip))
    if [ "$bad" -ne 0 ]; then
        grep -E '^ *[0-9]+/[0-9]+ .*(FAIL|TIMEOUT|UNEXPECTEDPASS)' "$log" | sed "s/^/$label: /"
        sed -n '/Listing only the last/,/^==/p' "$log" | tail -60
        # the names on the FAILED line too: CI keeps only the last lines
        local names
        names=$(sed -n -E 's/^ *[0-9]+\/[0-9]+ +([^ ]+) +(FAIL|TIMEOUT|UNEXPECTEDPASS).*/\1 (\2)/p' \
            "$log" | tr '\n' ' ')
        failures+=("$label: $bad failed: ${names% }")
        local line
        while IFS= read -r line; do
            failures+=("$line")
        done < <(meson_why "$dir" "$label" fail)
    fi
    if [ "$skip" -ne 0 ]; then
        local line
        while IFS= read -r line; do
            skips+=("$line")
            echo "$line"
        done < <(meson_why "$dir" "$label" skip)
    fi
    echo "$label: $ok ok, $bad failed, $skip skipped"
    rm -f "$log"
}

# The background chain (steps 2 and 5), started before the unit tests and
# waited for after the iotests, every part at nice 10 (the builds through
# make, as `make build-tsan build-fuzz` would run them).  It writes each
# part's verdict into $bgdir, which the main shell reads at the end: a
# build that failed fails its step (its log's tail is printed); the TSan
# programs and the fuzz targets are counted as before.
# TSan: the tests that exercise threads (the Makefile's build-tsan list:
# test-pool, test-file-io, test-file-space, test-vmstate-save,
# test-vmstate-load, test-aio-workload, test-aio-interleave and every
# tests/test-*thread*.c).  test-aio-workload's random workloads run on a
# 2 MiB image with 3000 requests each there (every request path and
# engine, in half the time of the full ones), all but the *_nbd ones:
# their server, nbdkit, cannot load a TSan-built plugin (tests/meson.build
# says why); the ASan run has them.
tsan_tests="test-pool test-file-io test-file-space test-vmstate-save test-vmstate-load"
tsan_tests="$tsan_tests test-aio-workload test-aio-interleave"
for f in tests/test-*thread*.c; do
    [ -f "$f" ] && tsan_tests="$tsan_tests $(basename "$f" .c)"
done
tsan_one() { # TEST: the exit code in $bgdir/tsan/TEST.rc, the log in /tmp/tsan-TEST.log
    local t=$1 tmp
    tmp=$(mktemp -d)
    # G_SLICE: plain malloc, as tests/meson.build says why
    G_SLICE=always-malloc TSAN_OPTIONS=halt_on_error=1 QIMG_TEST_TMPDIR=$tmp QIMG_TEST_AIO_MIB=2 \
        QIMG_TEST_AIO_REQUESTS=3000 QIMG_TEST_FILTER='*,!*_nbd' \
        nice -n 10 "build-tsan/tests/$t" >"/tmp/tsan-$t.log" 2>&1
    echo $? >"$bgdir/tsan/$t.rc"
    rm -rf "$tmp"
}
tsan_all() { # the TSan programs, two at a time (2 cores)
    local t
    for t in $tsan_tests; do
        [ -x "build-tsan/tests/$t" ] || continue # counted as missing at the end
        [ "$(jobs -rp | wc -l)" -ge 2 ] && wait -n
        tsan_one "$t" &
    done
    wait
}

# Fuzz targets, briefly (every fuzz/fuzz-*.c is a target), one at a time
# at nice 10.  Each runs its seeds and regression inputs once (the proof:
# all of them, whatever the time limit; its log's INITED line says the
# pass ended), then explores for QIMG_FUZZ_SECONDS (default 2) of wall
# time: 12 targets x 10 s were 120 s of make test's CPU, nearly all of it
# exploring, and a 10 s run's new coverage comes mostly in its first
# seconds (stop 54: at a fifth of the runs, 55-93% of the edges the whole
# run added, for all targets but the slowest, fuzz-qcow2-snapshot, which
# explored 31 inputs in CI's 10 s); nothing it finds is kept, so the long
# exploration is `make fuzz`'s.  An input may take 30 s before it
# counts as a hang: niced under the iotests' load, a slow but bounded one
# (a qcow2 check reporting a refcount per cluster of a 32768-cluster
# refblock: ~5 s of CPU under ASan) must not fail make test.
fuzz_one() { # NAME EXE: the verdict in $bgdir/fuzz/NAME.rc, the log in /tmp/NAME.log
    local name=$1 exe=$2 seeds corpus regress=()
    seeds=fuzz/seeds # a target's own seeds in fuzz/seeds-FORMAT, if it has them
    [ -d "fuzz/seeds-${name#fuzz-}" ] && seeds=fuzz/seeds-${name#fuzz-}
    corpus=$bgdir/fuzz/$name.corpus
    mkdir -p "$corpus"
    # Fixed seed: CI explores the same inputs every time (random, long
    # runs are `make fuzz`); fuzz/regress/NAME holds fixed crashes.
    [ -d "fuzz/regress/$name" ] && regress=("fuzz/regress/$name")
    # G_SLICE: plain malloc, so LeakSanitizer sees GLib's arrays and lists
    # (tests/meson.build says why)
    G_SLICE=always-malloc nice -n 10 "$exe" -seed=1 -max_total_time="${QIMG_FUZZ_SECONDS:-2}" \
        -rss_limit_mb=2048 -timeout=30 -artifact_prefix="$corpus/" "$corpus" "$seeds" \
        "${regress[@]+"${regress[@]}"}" >/tmp/$name.log 2>&1
    echo $? >"$bgdir/fuzz/$name.rc"
}
fuzz_names=()
for src in fuzz/fuzz-*.c; do
    [ -f "$src" ] && fuzz_names+=("$(basename "$src" .c)")
done
fuzz_all() {
    local name
    for name in "${fuzz_names[@]+"${fuzz_names[@]}"}"; do
        [ -x "build-fuzz/fuzz/$name" ] && fuzz_one "$name" "build-fuzz/fuzz/$name"
    done
}
bgdir=$(mktemp -d)
mkdir -p "$bgdir/tsan" "$bgdir/fuzz"
bg_chain() {
    local tree
    for tree in build-tsan build-fuzz; do
        nice -n 10 make --no-print-directory "$tree" JOBS=2 >"$bgdir/$tree.log" 2>&1
        echo $? >"$bgdir/$tree.rc"
        case $tree in
        build-tsan) tsan_all ;;
        build-fuzz) fuzz_all ;;
        esac
    done
    times >"$bgdir/times" # the chain's CPU (its children's, second line)
}
bg_start=$SECONDS
bg_chain &
bg_pid=$!

count_meson build-asan unit-asan
timed unit-asan

# Style: every C file as .clang-format wants it (clang-format is on the
# Debian base and installed by scripts/install-deps.sh).
if command -v clang-format >/dev/null; then
    # one clang-format for all files (one run each cost 27 s); the files
    # its "FILE:LINE:COL: error:" lines name, or its words if it failed so
    cf_out=$(git ls-files -z '*.c' '*.h' | xargs -0 clang-format --dry-run --Werror 2>&1)
    cf_rc=$?
    unformatted=$(sed -n 's/^\([^: ]*\):[0-9]*:[0-9]*: error: .*/\1/p' <<<"$cf_out" | sort -u)
    if [ "$cf_rc" -ne 0 ] && [ -z "$unformatted" ]; then
        unformatted="(clang-format failed: $(head -3 <<<"$cf_out"))"
    fi
    if [ -z "$unformatted" ]; then
        passed=$((passed + 1)); echo "clang-format: ok"
    else
        failed=$((failed + 1)); failures+=("clang-format: $(echo $unformatted)")
        echo "clang-format: not formatted: $(echo $unformatted) (run clang-format -i)"
    fi
else
    missing_step clang-format "clang-format is not installed"
fi

# Layers: no #include runs upward (tools/ sees include/qimg/ only).
if layers=$(scripts/check-layers.sh 2>&1); then
    passed=$((passed + 1)); echo "$layers"
else
    failed=$((failed + 1)); failures+=("layers: upward includes"); echo "$layers"
fi

# The ABI, and examples/embed.c built against the installed library.
for chk in abi install; do
    if out=$(scripts/check-$chk.sh build 2>&1); then
        passed=$((passed + 1)); echo "$out" | tail -1
    else
        failed=$((failed + 1)); failures+=("$chk: see above"); echo "$out"
    fi
done
timed checks

# iotests (each one skips, or under CI fails, by itself when a tool is missing)
log=$(mktemp)
QIMG=$PWD/build/tools/qimg iotests/run >"$log" 2>&1
# a failure's own output follows its FAIL line, indented
awk '/^(PASS|SKIP)/ {show = 0} /^SKIP/ {print} /^FAIL/ {show = 1} show' "$log" | head -300
line=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$log" | tail -1)
if [ -n "$line" ]; then
    p=$(echo "$line" | awk '{print $1}'); f=$(echo "$line" | awk '{print $3}')
    s=$(echo "$line" | awk '{print $5}')
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    if [ "$f" -ne 0 ]; then
        failures+=("iotests: $f failed")
        # each failed test and its first complaint (CI keeps the last lines)
        while IFS= read -r l; do
            failures+=("iotests: $l")
        done < <(awk 'function out() { if (name != "") print name ": " substr(why != "" ? why : first, 1, 200) }
            /^(PASS|SKIP|FAIL)/ {out(); name = ""}
            /^FAIL/ {name = $2; why = ""; first = ""; next}
            name != "" && /^[ \t]+[^ \t]/ {sub(/^[ \t]+/, "")
                if (first == "") first = $0
                if (why == "" && /^FAILED: /) why = $0}
            END {out()}' "$log")
    fi
    while IFS= read -r l; do
        skips+=("iotests: ${l#SKIP }")
    done < <(grep '^SKIP ' "$log")
    echo "iotests: $line"
    # (wall seconds depend on the machine's load; CPU seconds much less)
    sed -n 's/^[A-Z]* \([^ ]*\) (.*, \([0-9]*\)s, cpu \([0-9]*\)s)$/\3 \2 \1/p' "$log" |
        sort -rn | awk '{cpu += $1} NR <= 8 {top = top sep $3 " " $2 "s (cpu " $1 "s)"; sep = ", "}
            END {print "iotests: cpu " cpu "s in all; the most: " top}'
else
    cat "$log"; failed=$((failed + 1)); failures+=("iotests: runner failed")
fi
rm -f "$log"
timed iotests

# The background chain (steps 2 and 5): its verdicts.  Its time below is
# what it ran on after the iotests ended; its CPU is in the step it ended
# in (bash counts a child's CPU when it is reaped), and on its own line.
wait "$bg_pid"
bg_cpu=$(awk 'NR == 2 {
    n = split($1 " " $2, t, " "); s = 0
    for (k = 1; k <= n; k++) { split(t[k], ms, "m"); s += ms[1] * 60 + ms[2] }
    printf "%d\n", s + 0.5 }' "$bgdir/times" 2>/dev/null)
bg_line="background (build-tsan, TSan tests, build-fuzz, fuzz) $((SECONDS - bg_start))s (cpu ${bg_cpu:-?}s)"
build_ok() { # TREE LABEL: 0 if make TREE succeeded in the chain; else count it
    local rc
    rc=$(cat "$bgdir/$1.rc" 2>/dev/null || echo 1)
    [ "$rc" -eq 0 ] && return 0
    tail -30 "$bgdir/$1.log"
    failed=$((failed + 1))
    failures+=("$2: make $1 failed: $(grep -m1 -E 'error|Error|ERROR' "$bgdir/$1.log" | cut -c1-200)")
    echo "$2: make $1 failed"
    return 1
}
if build_ok build-tsan tsan; then
    for t in $tsan_tests; do
        if [ ! -x "build-tsan/tests/$t" ]; then
            missing_step "tsan $t" "build-tsan/tests/$t was not built"
            continue
        fi
        rc=$(cat "$bgdir/tsan/$t.rc" 2>/dev/null || echo 1)
        if [ "$rc" -eq 0 ]; then
            passed=$((passed + 1)); echo "tsan $t: ok"
        elif [ "$rc" -eq 77 ]; then
            why=$(sed -n 's/^SKIP [^:]*: //p' /tmp/tsan-$t.log | sort | uniq -c |
                awk '{n = $1; $1 = ""; printf "%s%d test(s):%s", sep, n, $0; sep = "; "}')
            skip_step "tsan $t" "${why:-exit 77, no reason printed}"
        else
            failed=$((failed + 1)); tail -40 /tmp/tsan-$t.log
            failures+=("tsan: $t: $(grep -m2 -E '\[  (FAILED|ERROR) +\]|WARNING: ThreadSanitizer|SUMMARY:' \
                /tmp/tsan-$t.log | tr '\n' ' ' | cut -c1-240)")
        fi
    done
fi
if build_ok build-fuzz fuzz; then
    for name in "${fuzz_names[@]+"${fuzz_names[@]}"}"; do
        if [ ! -x "build-fuzz/fuzz/$name" ]; then
            missing_step "fuzz $name" "build-fuzz/fuzz/$name was not built"
            continue
        fi
        if [ "$(cat "$bgdir/fuzz/$name.rc" 2>/dev/null)" = 0 ] &&
            grep -q '^#[0-9]*[[:space:]]*INITED' "/tmp/$name.log"; then
            passed=$((passed + 1)); echo "fuzz $name: ok ($(grep -o 'Done [0-9]* runs' /tmp/$name.log))"
        else
            failed=$((failed + 1)); tail -40 /tmp/$name.log
            why=$(grep -m2 -E '^==[0-9]+== ?ERROR|^SUMMARY:|runtime error' /tmp/$name.log |
                tr '\n' ' ' | cut -c1-240)
            failures+=("fuzz: $name: ${why:-its seeds and regression inputs did not all run (no INITED)}")
            for crash in "$bgdir/fuzz/$name.corpus"/crash-* "$bgdir/fuzz/$name.corpus"/timeout-* \
                "$bgdir/fuzz/$name.corpus"/oom-*; do
                [ -f "$crash" ] || continue # the input, to reproduce it elsewhere
                echo "$(basename "$crash") (gzip | base64):"
                gzip -9c "$crash" | base64 | head -c 65536; echo
            done
        fi
    done
fi
rm -rf "$bgdir"
timed background
echo "$bg_line"
echo "times: ${times[*]} (tests ${SECONDS}s)"

for s in "${skips[@]+"${skips[@]}"}"; do echo "SKIPPED: $s"; done
for f in "${failures[@]+"${failures[@]}"}"; do echo "FAILED: $f"; done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
