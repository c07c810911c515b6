#!/bin/bash
# scripts/qemu-iotests.sh [--qemu] [TEST...]: QEMU 7.2's own test suite,
# tests/qemu-iotests/check -qcow2 -g quick (or the TESTs named: "001",
# "qemu-img-bitmaps"), with qimg installed under its qemu-img and qemu-io
# names (`make install`'s qemu-compat links) -- the acceptance run of
# issue 29, kept out of `make test` (it takes 20-30 minutes).
#
# 1. The source: Debian's qemu 7.2 (`apt-get source qemu`, which needs a
#    deb-src line and dpkg-dev) in $QEMU_SRC (default: qemu-src next to the
#    repository, never inside it), fetched when missing.  Nothing of QEMU is
#    built: check runs the installed binaries.
# 2. qimg: built and installed into build-qsuite/prefix (its own meson
#    folder, without the unit tests; the nbdkit plugin goes there too, not
#    into nbdkit's system folder); qemu-img and qemu-io are
#    build-qsuite/prefix/libexec/qimg/qemu-compat/{qemu-img,qemu-io}.
#    The rest of what check needs is Debian's: qemu-system-x86_64 (package
#    qemu-system-x86; built without the qtest accelerator, so it runs
#    through a wrapper that gives it -accel tcg instead), qemu-nbd
#    (qemu-utils), qemu-storage-daemon (qemu-system-common).
#    --qemu runs Debian's qemu-img and qemu-io instead: the baseline.
# 3. check runs in $QEMU_SRC/run-qimg-CHECKOUT (run-qemu-CHECKOUT for
#    --qemu; CHECKOUT is the name of this repository's folder, so runs from
#    two checkouts sharing one source never touch each other's scratch
#    folder or servers), where its
#    scratch folder and the .out.bad files of failed tests stay; then one
#    line per test (PASS/FAIL/SKIP NAME, a skip with check's reason) and
#    "qemu-iotests: N passed, M failed, K not run" (exit 1 if any failed).
#
# Environment: QEMU_SRC, QEMU_IOTESTS_GROUP (default quick; unused when
# TESTs are named), QEMU_IOTESTS_FORMAT (default qcow2), JOBS (qimg's
# build, default 2).
set -uo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
QEMU_SRC=${QEMU_SRC:-$(dirname "$REPO")/qemu-src}
GROUP=${QEMU_IOTESTS_GROUP-quick}
FORMAT=${QEMU_IOTESTS_FORMAT:-qcow2}
oracle=qimg
if [ "${1:-}" = --qemu ]; then
    oracle=qemu
    shift
fi

die() {
    echo "qemu-iotests: $*" >&2
    exit 2
}

# 1. The source.
find_iotests() {
    local d
    for d in "$QEMU_SRC"/qemu-*/tests/qemu-iotests; do
        [ -x "$d/check" ] && echo "$d" && return 0
    done
    return 1
}
if ! IOTESTS=$(find_iotests); then
    command -v dpkg-source >/dev/null ||
        die "dpkg-source is missing: apt-get install dpkg-dev"
    mkdir -p "$QEMU_SRC" || die "cannot create $QEMU_SRC"
    echo "Fetching QEMU's source (apt-get source qemu) into $QEMU_SRC"
    if ! (cd "$QEMU_SRC" && apt-get source -qq qemu >/dev/null); then
        die "apt-get source qemu failed: it needs deb-src lines (in
/etc/apt/sources.list.d/debian.sources, 'Types: deb deb-src'), then apt-get update"
    fi
    IOTESTS=$(find_iotests) || die "no tests/qemu-iotests/check under $QEMU_SRC"
fi
for t in qemu-system-x86_64 qemu-nbd qemu-storage-daemon python3; do
    command -v "$t" >/dev/null ||
        die "$t is missing (Debian: qemu-system-x86, qemu-utils, qemu-system-common, python3)"
done

# 2. qimg, installed with its qemu-compat links.
if [ "$oracle" = qimg ]; then
    BUILD=$REPO/build-qsuite
    PREFIX=$BUILD/prefix
    if [ ! -f "$BUILD/build.ninja" ]; then
        # nbdkit's plugin folder, as pkg-config tells it, is the system's:
        # a copy of nbdkit.pc puts the plugin under PREFIX instead.
        mkdir -p "$BUILD/pkgconfig"
        if pc=$(pkg-config --variable=pcfiledir nbdkit 2>/dev/null); then
            sed "s|^plugindir=.*|plugindir=$PREFIX/lib/nbdkit/plugins|" \
                "$pc/nbdkit.pc" >"$BUILD/pkgconfig/nbdkit.pc"
        fi
        PKG_CONFIG_PATH=$BUILD/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH} \
            meson setup "$BUILD" --prefix="$PREFIX" -Dtests=false >/dev/null ||
            die "meson setup $BUILD failed"
    fi
    ninja -C "$BUILD" -j "${JOBS:-2}" >/dev/null || die "building qimg failed"
    meson install -C "$BUILD" --quiet >/dev/null || die "meson install failed"
    COMPAT=$(find "$PREFIX" -type d -path '*/qimg/qemu-compat' | head -n 1)
    [ -n "$COMPAT" ] || die "no qemu-compat folder under $PREFIX"
    export QEMU_IMG_PROG=$COMPAT/qemu-img QEMU_IO_PROG=$COMPAT/qemu-io
else
    export QEMU_IMG_PROG=$(command -v qemu-img) QEMU_IO_PROG=$(command -v qemu-io)
fi
# Debian builds qemu-system-x86_64 without the qtest accelerator that
# check asks for (-accel qtest: "invalid accelerator qtest", and every test
# that starts a VM fails, with QEMU's tools too): a wrapper of the same
# name (check's filters match the name) gives Debian's binary -accel tcg,
# and, as firmware, 64 KiB of HLT instructions: under qtest no guest code
# runs, and under tcg SeaBIOS would read the test's drives as it boots
# (it met 030's blkdebug breakpoints and hung QEMU in a virtio reset).
QEMU_SYSTEM=$(command -v qemu-system-x86_64)
if ! "$QEMU_SYSTEM" -accel help 2>/dev/null | grep -qx qtest; then
    mkdir -p "$QEMU_SRC/bin"
    head -c 65536 /dev/zero | tr '\0' '\364' >"$QEMU_SRC/bin/halt.bin"
    cat >"$QEMU_SRC/bin/qemu-system-x86_64" <<WRAP
#!/bin/bash
# scripts/qemu-iotests.sh: Debian's qemu-system-x86_64, -accel tcg and a
# firmware that halts for qtest
args=() qtest=
for a in "\$@"; do
    [ "\$a" = qtest ] && [ "\${args[-1]:-}" = -accel ] && a=tcg qtest=1
    args+=("\$a")
done
[ -z "\$qtest" ] || args+=(-bios "$QEMU_SRC/bin/halt.bin")
exec "$QEMU_SYSTEM" "\${args[@]}"
WRAP
    chmod +x "$QEMU_SRC/bin/qemu-system-x86_64"
    QEMU_SYSTEM=$QEMU_SRC/bin/qemu-system-x86_64
fi
export QEMU_PROG=$QEMU_SYSTEM
export QEMU_NBD_PROG=$(command -v qemu-nbd)
export QSD_PROG=$(command -v qemu-storage-daemon)

# 3. The run, in a folder of its own (check takes it for a build tree when
# called through a link).
RUN=$QEMU_SRC/run-$oracle-$(basename "$REPO")/tests/qemu-iotests
mkdir -p "$RUN" || die "cannot create $RUN"
ln -sfn "$IOTESTS/check" "$RUN/check"

# What a failed test leaves behind: FUSE exports mounted in the scratch
# folder (108) and servers started with --fork (qemu-nbd, qemu-storage-
# daemon) that still use the run's folders.  Only processes whose command
# line names this run's folder are ended, each by its PID.
leftovers() {
    local m pid
    while read -r _ m _; do
        case "$m" in "$RUN"/*) umount -l "$m" 2>/dev/null ;; esac
    done </proc/mounts
    for pid in $(ls /proc | grep -E '^[0-9]+$'); do
        [ "$pid" = $$ ] && continue
        if tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF "$RUN/"; then
            case "$(cat "/proc/$pid/comm" 2>/dev/null)" in
            qemu-*) kill "$pid" 2>/dev/null ;;
            esac
        fi
    done
}
leftovers
rm -rf "$RUN/scratch" "$RUN/sock"
export TEST_DIR=$RUN/scratch SOCK_DIR=$RUN/sock
log=$RUN/check.log
args=(-"$FORMAT")
[ -n "$GROUP" ] && [ $# -eq 0 ] && args+=(-g "$GROUP") # TESTs named: those
echo "qemu-iotests: $("$QEMU_IMG_PROG" --version | head -n 1); log in $log"
(cd "$RUN" && ./check --color off "${args[@]}" "$@") >"$log" 2>&1
rc=$?
leftovers

# check prints "NAME ... " then, after a carriage return, "NAME RESULT
# [start] [end] TIME DESCRIPTION" (why a test was not run, or failed).
tr '\r' '\n' <"$log" | python3 -c '
import re, sys
n = {"pass": 0, "fail": 0, "not run": 0}
word = {"pass": "PASS", "fail": "FAIL", "not run": "SKIP"}
line_re = re.compile(r"^(\S+)\s+(pass|fail|not run)\s+\[[^]]*\]\s*(\[[^]]*\])?"
                     r"\s*([0-9.]+s)?\s*(\(last: [^)]*\))?\s*(.*)$")
for line in sys.stdin:
    m = line_re.match(line.rstrip("\n"))
    if not m:
        continue
    n[m.group(2)] += 1
    why = m.group(6).strip()
    print(word[m.group(2)], m.group(1) + (": " + why if why else ""))
print("qemu-iotests: %d passed, %d failed, %d not run"
      % (n["pass"], n["fail"], n["not run"]))
sys.exit(1 if n["fail"] else 0)'
sum_rc=$?
if [ "$sum_rc" -eq 0 ] && [ "$rc" -ne 0 ]; then
    echo "qemu-iotests: check exited with $rc:" >&2
    tail -n 20 "$log" >&2
    exit 1
fi
exit "$sum_rc"
