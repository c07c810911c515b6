#!/bin/bash
# kill -9 during "qimg vmstate save": while the stream is written (at
# several points of a 96 MiB save, buffered, unbuffered and cache=none)
# and during the commit (flush, snapshot creation, dropping the active
# copy; detected as the moment the stream file has been read to its end,
# then killed after 0 .. 150 ms).  After every kill:
#   - qemu-img check finds no corruption (leaks are allowed: rc 0 or 3),
#     with one exception that no order of writes can avoid (QEMU has it
#     too): snapshot creation raises the refcount of every cluster the
#     active L1 reaches (1 -> 2) and clears their COPIED flags, two writes
#     to different clusters, so a crash between them leaves COPIED flags
#     that disagree with refcounts (rc 2, "ERROR OFLAG_COPIED" only; no
#     reference to a free cluster, no data at risk).  That case is counted
#     and "qemu-img check -r all" must then leave the image clean;
#   - the snapshot is either absent or complete: its VM state reads back
#     equal to the stream, through qimg and through QEMU (qemu-img snapshot
#     -a + qemu-io read -b, sampled);
#   - the older snapshots (one with a VM state, one disk-only) and the disk
#     are intact;
#   - after qemu-img check -r leaks the image is clean, and qimg can save
#     a state into it again.
# make test: 2 of 3 kill points in the stream (0.05, 0.4, 0.8 of a whole
# save) and 2 of 4 in the commit (0, 0.01, 0.06, 0.15 s) in each cache mode,
# in turn: buffered 0.4 0.8 / 0 0.06, --unbuffered 0.05 0.8 / 0 0.15, -t
# none 0.05 0.4 / 0.01 0.06, so that every point meets two modes or one,
# and every mode an early or midway stream kill and a commit kill within
# 0.01 s of its start (12 kills, 21 before: each costs ~1 s of CPU in its
# checks; a kill point is a moment in time, which a loaded machine moves
# anyway); QEMU reads the last 512 KiB of a surviving state.  QIMG_LONG=1
# (make check-long): 5 and 7 kill points in every mode, QEMU reads 4 MiB.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io cmp python3

MiB=$((1024 * 1024))
SIZE=$((96 * MiB))
# QEMU reads the last SAMPLE bytes of a surviving state: 512 KiB (its hex
# dump is costly; QIMG_LONG=1: 4 MiB); qimg reads all of it
SAMPLE=$((512 * 1024))
[ -n "${QIMG_LONG:-}" ] && SAMPLE=$((4 * MiB))

head -c "$SIZE" /dev/urandom >big.bin
head -c $((3 * MiB + 5)) /dev/urandom >old.bin

qi create -f qcow2 base.qcow2 64M
"$QEMU_IO" -c "write -q -s old.bin 0 $((3 * MiB))" base.qcow2 >/dev/null
qi snapshot -c disk base.qcow2
"$QIMG" vmstate save base.qcow2 old old.bin || { echo "setup: save old failed"; exit 1; }
"$QEMU_IMG" convert -O raw base.qcow2 disk.raw

# crash_run MODE WHEN DELAY OPTS...: save big.bin as "new" into crash.qcow2
# and kill -9 it, WHEN = "time" (DELAY seconds after the start) or "eof"
# (DELAY seconds after the stream was read to its end).  Prints what
# happened: "killed", or "finished rc N" when it ended first.
crash_run() {
    python3 - "$QIMG" "$@" <<'EOF'
import os, signal, subprocess, sys, time
qimg, when, delay, opts = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:]
p = subprocess.Popen([qimg, "vmstate", "save", *opts, "crash.qcow2", "new", "big.bin"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
size = os.path.getsize("big.bin")
t0 = time.monotonic()
fd = None
if when == "time":
    try:
        p.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        pass
while when == "eof" and p.poll() is None:
    # find the stream's descriptor, wait for its offset
    nap = 0.0002
    try:
        if fd is None:
            for n in os.listdir("/proc/%d/fd" % p.pid):
                if os.readlink("/proc/%d/fd/%s" % (p.pid, n)).endswith("/big.bin"):
                    fd = n
        if fd is not None:
            with open("/proc/%d/fdinfo/%s" % (p.pid, fd)) as f:
                pos = int(f.readline().split()[1])
            if pos >= size:
                time.sleep(delay)
                break
            # every 0.2 ms near the end; before, a quarter of the time the
            # rest of the stream takes at the rate so far (at most 10 ms)
            rate = pos / (time.monotonic() - t0)
            if rate > 0:
                nap = max(nap, min(0.01, (size - pos) / rate / 4))
    except (OSError, ValueError):
        pass
    time.sleep(nap)
if p.poll() is None:
    p.send_signal(signal.SIGKILL)
    p.wait()
    print("killed %.3f s" % (time.monotonic() - t0))
else:
    print("finished rc %d" % p.returncode)
EOF
}

# QEMU's own read of bytes [off, off+len) of a snapshot's state vs the file.
qemu_sample_ok() {
    local img=$1 name=$2 file=$3 off=$4 len=$5
    qemu_vmstate_read "$img" "$name" "$off" "$len" sample.bin || return 1
    cmp -s sample.bin <(tail -c +$((off + 1)) "$file" | head -c "$len")
}

# verify DESC: the checks of the header comment on crash.qcow2.
verify() {
    local desc=$1 rc n
    "$QEMU_IMG" check crash.qcow2 >check.out 2>&1
    rc=$?
    _checks=$((_checks + 1))
    if [ "$rc" = 2 ] && ! grep '^ERROR' check.out | grep -q -v '^ERROR OFLAG_COPIED' &&
        grep -q '^ERROR OFLAG_COPIED' check.out; then
        # The window of snapshot creation (see the header): only COPIED
        # flags disagree with refcounts; check -r all must clean it up.
        copied_window=$((copied_window + 1))
        echo "$desc: OFLAG_COPIED only: $(grep -c '^ERROR OFLAG_COPIED' check.out) entries"
        assert_rc "$desc: qemu-img check -r all" 0 "$QEMU_IMG" check -r all crash.qcow2
    elif [ "$rc" != 0 ] && [ "$rc" != 3 ]; then
        _fail "$desc: qemu-img check rc $rc"
        grep -v '^Leaked' check.out | head -n 20
        keep crash.qcow2 "$desc"
        return 1
    fi
    state_size n crash.qcow2 new
    if [ -n "$n" ]; then
        complete=$((complete + 1))
        assert_eq "$desc: size of the surviving snapshot" "$SIZE" "$n"
        "$QIMG" vmstate load crash.qcow2 new out.bin
        _checks=$((_checks + 1))
        cmp -s big.bin out.bin || _fail "$desc: the surviving snapshot's state differs"
        _checks=$((_checks + 1))
        qemu_sample_ok crash.qcow2 new big.bin $((SIZE - SAMPLE)) $SAMPLE ||
            _fail "$desc: QEMU reads the surviving state differently"
    else
        absent=$((absent + 1))
    fi
    "$QIMG" vmstate load crash.qcow2 old out.bin
    _checks=$((_checks + 1))
    cmp -s old.bin out.bin || _fail "$desc: the older snapshot's state differs"
    "$QEMU_IMG" convert -O raw crash.qcow2 now.raw
    _checks=$((_checks + 1))
    cmp -s disk.raw now.raw || _fail "$desc: the disk changed"
    "$QEMU_IMG" convert -l disk -O raw crash.qcow2 now.raw
    _checks=$((_checks + 1))
    cmp -s disk.raw now.raw || _fail "$desc: the disk-only snapshot changed"
    rm -f out.bin now.raw
    assert_rc "$desc: qemu-img check -r leaks" 0 "$QEMU_IMG" check -r leaks crash.qcow2
    assert_rc "$desc: qemu-img check after repair" 0 "$QEMU_IMG" check crash.qcow2
    [ -n "${KEEP_FAILED:-}" ] && cp crash.qcow2 before-save.qcow2
    assert_rc "$desc: qimg vmstate save after the crash" 0 \
        "$QIMG" vmstate save crash.qcow2 again old.bin
    if ! assert_rc "$desc: qemu-img check after the new save" 0 "$QEMU_IMG" check crash.qcow2; then
        keep before-save.qcow2 "$desc"
    fi
    rm -f before-save.qcow2
}

# state_size VAR IMG NAME: VAR = the vm-state-size of IMG's snapshot NAME
# in qemu-img info --output=json (empty without one), read by the shell
# (common.sh's vm_state_size runs python3 for it)
state_size() {
    local _l _name='' _size=''
    printf -v "$1" '%s' ''
    "$QEMU_IMG" info --output=json "$2" >info.json || return 1
    while IFS= read -r _l; do
        case $_l in
        *'"name": '*) _name=${_l#*'"name": '} ;;
        *'"vm-state-size": '*) _size=${_l#*'"vm-state-size": '} ;;
        *'}'*)
            [ "$_name" = "\"$3\"," ] || [ "$_name" = "\"$3\"" ] && printf -v "$1" '%s' "${_size%,}"
            _name='' _size=''
            ;;
        esac
    done <info.json
}

# keep FILE DESC: with KEEP_FAILED=DIR, keep a failing image for a reproducer.
keep() {
    if [ -n "${KEEP_FAILED:-}" ]; then
        mkdir -p "$KEEP_FAILED"
        cp "$1" "$KEEP_FAILED/$(date +%s%N)-${1%.qcow2}.qcow2"
        echo "kept $1 in $KEEP_FAILED ($2)"
    fi
}

complete=0
absent=0
copied_window=0
# Time of a whole save, to place the kills.
cp base.qcow2 crash.qcow2
t0=$EPOCHREALTIME
"$QIMG" vmstate save crash.qcow2 new big.bin || { echo "setup: full save failed"; exit 1; }
full=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }')
echo "a full save takes $full s"
verify "no crash"

# make test: each cache mode's kill points (the header says which);
# QIMG_LONG=1 (make check-long): more, and all in every mode
m=0
for opts in "" "--unbuffered" "-t none"; do
    case $m in
    0) fracs="0.4 0.8" delays="0 0.06" ;;
    1) fracs="0.05 0.8" delays="0 0.15" ;;
    2) fracs="0.05 0.4" delays="0.01 0.06" ;;
    esac
    m=$((m + 1))
    if [ -n "${QIMG_LONG:-}" ]; then
        fracs="0.05 0.2 0.4 0.6 0.8"
        delays="0 0.002 0.01 0.03 0.06 0.1 0.15"
    fi
    for frac in $fracs; do
        cp base.qcow2 crash.qcow2
        d=$(awk -v f="$full" -v x="$frac" 'BEGIN { printf "%.3f", f * x }')
        # shellcheck disable=SC2086
        what=$(crash_run time "$d" $opts)
        echo "[$opts] kill at $d s: $what"
        verify "[$opts] kill at $d s ($what)"
    done
    for d in $delays; do
        cp base.qcow2 crash.qcow2
        # shellcheck disable=SC2086
        what=$(crash_run eof "$d" $opts)
        echo "[$opts] kill $d s after the stream's end: $what"
        verify "[$opts] kill $d s after the stream's end ($what)"
    done
done
echo "surviving snapshots: $complete complete, $absent absent;" \
    "$copied_window crashes hit the COPIED-flag window"

finish
