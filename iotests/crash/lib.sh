# iotests/crash/lib.sh: helpers of the crash-state iotests (05x-crash-*),
# sourced after common.sh.  See iotests/crash/crash.py for the model (and
# the modules beside it that it names).
#
# Every case records one operation with qimg's recording node
# (record:LOG:FILE) -- or, for the positive control, with QEMU's
# blklogwrites driver under qemu-io / qemu-img -- and hands the log to
# crash.py explore, which rebuilds power-loss states and judges each with
# qemu-img.  A case passes when no state is corrupt and no flushed write is
# lost.  States per case: CRASH_STATES (default 16, a test may set fewer
# before sourcing this; QIMG_LONG=1: 200), for the positive control
# CRASH_CONTROL_STATES (8; QIMG_LONG=1: 100); identical states are judged
# once.  crash.py runs as one python3 for the whole test (crash_py), which
# crash_summary ends.  The positive control (reported, never judged: it
# proves the explorer reads QEMU's blklogwrites logs and finds the windows
# QEMU leaves) runs for the first CRASH_CONTROL_CASES cases of a test that
# has one (default 1; QIMG_LONG=1: every case): each costs a QEMU run and
# its own explore, and checks nothing of qimg's.

CRASH_PY="$IOTESTS_DIR/crash/crash.py"
CRASH_STATES=${CRASH_STATES:-16}
CRASH_CONTROL_STATES=${CRASH_CONTROL_STATES:-8}
if [ -n "${QIMG_LONG:-}" ]; then
    CRASH_STATES=${CRASH_LONG_STATES:-200}
    CRASH_CONTROL_STATES=${CRASH_LONG_CONTROL_STATES:-100}
fi
CRASH_CONTROL_CASES=${CRASH_CONTROL_CASES:-1}
[ -n "${QIMG_LONG:-}" ] && CRASH_CONTROL_CASES=1000000
_crash_controls=0
CRASH_SUMMARY=${CRASH_SUMMARY:-$SCRATCH/summary.jsonl}
export QIMG QEMU_IMG

# crash_py SUBCOMMAND ARGS...: crash.py SUBCOMMAND ARGS, run by one python3
# that serves the whole test (crash.py serve, a coprocess started on first
# use): a python3 start and crash.py's imports cost ~0.15 s of CPU, and a
# test runs dozens of explores.  Returns the subcommand's exit code.
_CRASH_PID=
crash_py() {
    local rc
    if [ -z "$_CRASH_PID" ] || ! kill -0 "$_CRASH_PID" 2>/dev/null; then
        # requests on its stdin, answers on fd 3; its output goes where ours does
        exec {_crash_out}>&1
        coproc _CRASHD { exec python3 "$CRASH_PY" serve 3>&1 1>&"$_crash_out"; }
        exec {_crash_out}>&-
        # shellcheck disable=SC2153 # (set by coproc)
        _CRASH_PID=$_CRASHD_PID
        _CRASH_IN=${_CRASHD[1]}
        _CRASH_OUT=${_CRASHD[0]}
    fi
    printf '%s\0' "$#" "$@" >&"$_CRASH_IN"
    if ! read -r rc <&"$_CRASH_OUT"; then
        echo "crash.py serve died: crash.py $1 failed"
        _CRASH_PID=
        return 1
    fi
    return "$rc"
}

# crash_control_due: whether this case runs its positive control (the
# first CRASH_CONTROL_CASES that have one do).
crash_control_due() {
    [ "$_crash_controls" -lt "$CRASH_CONTROL_CASES" ] || return 1
    _crash_controls=$((_crash_controls + 1))
}

# crash_explore LABEL ARGS...: judge a log; counts as one check.  In
# positive-control mode (CONTROL=1) failures are reported, not counted.
crash_explore() {
    local label=$1 rc
    shift
    local extra=() states=$CRASH_STATES
    if [ "${CONTROL:-0}" = 1 ]; then
        extra+=(--expect-failures)
        states=$CRASH_CONTROL_STATES
    fi
    crash_py explore --label "$label" --states "$states" \
        --seed "$label" --summary "$CRASH_SUMMARY" --tmpdir "$SCRATCH" \
        "${extra[@]}" "$@"
    rc=$?
    _checks=$((_checks + 1))
    if [ $rc != 0 ]; then
        _fail "$label: crash states failed"
    fi
}

# crash_io_case LABEL SIZE CLUSTER CREATE-OPTS [WORKLOAD-OPTS...]: a random
# guest I/O workload (tagged writes, zero writes, discards, flushes) through
# `qimg io -t writeback` (IO_CACHE: another cache mode), then (unless
# NO_CONTROL) the same script through qemu-io over blklogwrites as the
# positive control.  FORMAT (default qcow2) is the image format: vpc, vdi,
# vhdx and vmdk are judged by crash/formats.py.  The files the format made
# beside img.FORMAT (a twoGbMaxExtentSparse VMDK's extents, img-s001.vmdk
# ...; qimg's recording node logs them with the image) get their bases too;
# such an image has no positive control (blklogwrites logs one file).  With LUKS=PASS (qcow2 only) the
# image is encrypted (encrypt.format=luks, passphrase PASS): both tools open
# it with the key, crash.py decrypts the logs to find the markers and fails
# on any of the workload's data in qimg's log in the clear.  OPEN_OPTS
# (",KEY=VALUE...") are open options both tools get (--image-opts), e.g.
# the qcow2 cache's.  EXPLORE_ARGS: more crash.py explore arguments for the
# qimg run (e.g. --min-ring-allocs N: the io_uring path was taken).
crash_io_case() {
    local label=$1 size=$2 cs=$3 copts=$4
    shift 4
    local d=$SCRATCH/$label backing_args=() link_args=() luks_args=() fmt=${FORMAT:-qcow2}
    local sec=() img_m=() q_opts=${OPEN_OPTS:-}
    mkdir -p "$d"
    if [ -n "${LUKS:-}" ]; then
        sec=(--object "secret,id=crash0,data=$LUKS")
        copts="$copts -o encrypt.format=luks,encrypt.key-secret=crash0,encrypt.iter-time=10"
        luks_args=(--luks-secret "$LUKS")
        q_opts="$q_opts,encrypt.key-secret=crash0"
    fi
    (
        cd "$d" || exit 1
        if [ -n "${LUKS:-}" ]; then
            # qemu-img's key benchmark fails now and then: try again
            for _ in 1 2 3 4 5 6 7 8; do
                # shellcheck disable=SC2086
                "$QEMU_IMG" create -q -f "$fmt" "${sec[@]}" $copts "img.$fmt" "$size" \
                    2>create.err && break
                grep -q 'accurate CPU' create.err || exit 1
            done
        elif [ -n "${BACKING:-}" ]; then
            head -c "$BACKING" /dev/urandom >backing.raw
            # shellcheck disable=SC2086
            "$QEMU_IMG" create -q -f "$fmt" -b backing.raw -F raw $copts img.$fmt "$size"
        else
            # shellcheck disable=SC2086
            "$QEMU_IMG" create -q -f "$fmt" $copts img.$fmt "$size"
        fi
    ) || { _fail "$label: create"; return; }
    cp "$d/img.$fmt" "$d/base.$fmt"
    [ -f "$d/img.data" ] && cp "$d/img.data" "$d/base.data"
    local ext_args=() f
    for f in "$d"/img-*."$fmt"; do
        [ -f "$f" ] || continue
        cp "$f" "$f.base"
        ext_args+=(--base "$f=$f.base")
    done
    # the disk's size as the format made it (VHD rounds to its geometry):
    # crash.py asks the image
    crash_py workload --dir "$d/wl" --seed "$label" --size-of "$d/img.$fmt" --format "$fmt" \
        --cluster-size "$cs" "$@"
    if [ -n "${BACKING:-}" ]; then
        backing_args=(--backing-raw "$d/backing.raw")
        link_args=(--link "backing.raw=$d/backing.raw")
    fi
    local data_args=()
    [ -f "$d/img.data" ] && data_args=(--base "$d/img.data=$d/base.data")

    if [ -n "$q_opts" ]; then
        img_m=("${sec[@]}" --image-opts
            "driver=$fmt,file.filename=record:$d/log:img.$fmt$q_opts")
    else
        img_m=(-f "$fmt" "record:$d/log:img.$fmt")
    fi
    (cd "$d" && "$QIMG" io -t "${IO_CACHE:-writeback}" "${img_m[@]}" <wl/script >io.out 2>&1)
    if grep -q -i "failed\|error" "$d/io.out"; then
        _fail "$label: qimg io reported an error"
        grep -i -m3 "failed\|error" "$d/io.out"
        return
    fi
    # shellcheck disable=SC2086 # EXPLORE_ARGS: several words
    crash_explore "qimg-$label" --format "$fmt" --log "$d/log" --base "$d/img.$fmt=$d/base.$fmt" \
        "${data_args[@]}" "${ext_args[@]}" --image "$d/img.$fmt" --model "$d/wl/model.json" \
        "${backing_args[@]}" "${link_args[@]}" "${luks_args[@]}" \
        ${LUKS:+--no-plaintext} ${EXPLORE_ARGS:-}

    [ -n "${NO_CONTROL:-}" ] && return
    if [ ${#ext_args[@]} -gt 0 ]; then
        echo "$label: no positive control (blklogwrites logs one file, the image has extent files)"
        return
    fi
    crash_control_due || return 0
    # The positive control: qemu-io runs the same script on a fresh copy.
    cp "$d/base.$fmt" "$d/q.$fmt"
    [ -f "$d/base.data" ] && cp "$d/base.data" "$d/img.data"
    : >"$d/qlog"
    (cd "$d" && "$QEMU_IO" "${sec[@]}" --image-opts \
        "driver=$fmt,file.driver=blklogwrites,file.file.filename=$d/q.$fmt,file.log.filename=$d/qlog$q_opts" \
        <wl/script >qio.out 2>&1)
    CONTROL=1 crash_explore "qemu-io-$label" --format "$fmt" --log "$d/qlog" --qemu-file "$d/q.$fmt" \
        --base "$d/q.$fmt=$d/base.$fmt" --image "$d/q.$fmt" \
        --model "$d/wl/model.json" "${backing_args[@]}" "${link_args[@]}" "${luks_args[@]}"
}

# crash_py_stop: end the crash.py server and wait for it (its CPU time, and
# that of the tools it ran, then counts as this test's).
crash_py_stop() {
    [ -n "$_CRASH_PID" ] || return 0
    exec {_CRASH_IN}>&- {_CRASH_OUT}<&-
    wait "$_CRASH_PID"
    _CRASH_PID=
}

# crash_summary: the totals of every explore of this test (one line a
# group); ends the crash.py server.
crash_summary() {
    crash_py summary "$CRASH_SUMMARY"
    crash_py_stop
}

# crash_op LABEL DIR EXPLORE-ARGS -- QIMG-ARGS...: run `qimg QIMG-ARGS` in DIR
# with @IMG@ standing for the recorded image (record:DIR/log:img.qcow2),
# after saving DIR/img.qcow2 (and img.data) as the base; then explore.
# With CONTROL_ARGS set (qemu-img arguments, @IMGOPTS@ = the image over
# blklogwrites, for --image-opts), the positive control runs the same
# operation on a copy of the base.
crash_op() {
    local label=$1 d=$2 explore=() args=() a
    shift 2
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        explore+=("$1")
        shift
    done
    shift
    cp "$d/img.qcow2" "$d/base.qcow2"
    local bases=(--base "$d/img.qcow2=$d/base.qcow2")
    if [ -f "$d/img.data" ]; then
        cp "$d/img.data" "$d/base.data"
        bases+=(--base "$d/img.data=$d/base.data")
    fi
    for a in "$@"; do
        args+=("${a//@IMG@/record:$d/log:img.qcow2}")
    done
    rm -f "$d/log"
    if ! (cd "$d" && "$QIMG" "${args[@]}" >op.out 2>&1); then
        _fail "$label: qimg ${args[*]} failed"
        cat "$d/op.out"
        return
    fi
    crash_explore "qimg-$label" --log "$d/log" "${bases[@]}" --image "$d/img.qcow2" \
        "${explore[@]//@DIR@/$d}"
    [ -z "${CONTROL_ARGS+x}" ] && return
    crash_control_due || return 0
    cp "$d/base.qcow2" "$d/q.qcow2"
    : >"$d/qlog"
    local qopts="driver=qcow2,file.driver=blklogwrites,file.file.filename=$d/q.qcow2,file.log.filename=$d/qlog"
    args=()
    for a in "${CONTROL_ARGS[@]}"; do
        args+=("${a//@IMGOPTS@/$qopts}")
    done
    if ! (cd "$d" && "$QEMU_IMG" "${args[@]}" >qop.out 2>&1); then
        echo "positive control: qemu-img ${args[*]} failed: $(cat "$d/qop.out")"
        return
    fi
    CONTROL=1 crash_explore "qemu-img-$label" --log "$d/qlog" --qemu-file "$d/q.qcow2" \
        --base "$d/q.qcow2=$d/base.qcow2" --image "$d/q.qcow2" "${explore[@]//@DIR@/$d}"
}
