# iotests/common.sh: helpers sourced by every iotests/tests/NNN-name.sh.
#
# A test exits 0 (pass), 1 (fail) or 77 (skip).  It runs in a fresh scratch
# folder (its working directory) that is removed when it exits, so file
# names in the output of qimg and qemu-img are the same short names.
#
# Honest verdicts: a test passes only through finish, and only when it made
# at least one check (assert_*, same_as_qemu*, expect_error, or its own
# _checks increments); it skips only through skip.  Both write their verdict
# to $QIMG_IOTEST_VERDICT when set (iotests/run sets it), so that the runner
# can tell a test that ended on its own (exit 0 without finish) from a pass.
# A missing tool (requires) is a skip, and with CI=true a failure.
#
# A test sources this file as . "${0%/*}/../common.sh" (no dirname process
# per test): run it by a path that names its folder (iotests/run does; by
# hand, ./NNN-name.sh or iotests/tests/NNN-name.sh).
#
# Environment:
#   QIMG      the qimg binary (default: build/tools/qimg, else build/qimg,
#             in the repository)
#   QEMU_IMG  qemu-img (default: qemu-img on PATH)
#   QEMU_IO   qemu-io (default: qemu-io on PATH)
#   QEMU_SYSTEM  qemu-system-x86_64 (default: qemu-system-x86_64 on PATH)
#   QIMG_NBD_PLUGIN  nbdkit-qimg-plugin.so (default: ../nbd/ next to QIMG)
#   TMPDIR    where scratch folders go (default: iotests/scratch)
#   CI        "true" (or "1"): a missing tool fails the test instead of
#             skipping it

# (the folders by the shell's own expansions and cd, not dirname and
# subshells: this runs once per test, ~8 ms of CPU per process saved)
_here=${BASH_SOURCE[0]}
[[ "$_here" == */* ]] && _here=${_here%/*} || _here=.
_pwd=$PWD
CDPATH= cd -- "$_here" && IOTESTS_DIR=$PWD && CDPATH= cd -- "$_pwd" || exit 1
REPO_DIR=${IOTESTS_DIR%/*}
REPO_DIR=${REPO_DIR:-/}
unset _here _pwd

if [ -z "${QIMG:-}" ]; then
    if [ -x "$REPO_DIR/build/tools/qimg" ]; then
        QIMG=$REPO_DIR/build/tools/qimg
    else
        QIMG=$REPO_DIR/build/qimg
    fi
fi
case "$QIMG" in
/*) ;;
*) QIMG=$PWD/$QIMG ;;
esac
# The nbdkit plugin built next to the qimg binary (nbd/).
QIMG_NBD_PLUGIN=${QIMG_NBD_PLUGIN:-${QIMG%/*}/../nbd/nbdkit-qimg-plugin.so}
QEMU_IMG=${QEMU_IMG:-qemu-img}
# QEMU's LUKS setup fails now and then on these machines: qemu-img runs
# through iotests/qemu-img-pbkdf-retry (its head says why), when it exists.
if [ "${QEMU_IMG##*/}" = qemu-img ] && QEMU_IMG_REAL=$(command -v "$QEMU_IMG"); then
    QEMU_IMG=$IOTESTS_DIR/qemu-img-pbkdf-retry
    export QEMU_IMG_REAL
    # In the tests' own shell "$QEMU_IMG" is this function (bash runs a
    # function named by a path with slashes before the file): a command
    # that names neither luks nor encrypt runs qemu-img itself, as the
    # script would (exec), without the bash the script starts (~6 ms of
    # CPU on each of the thousands of qemu-img runs); the others go to the
    # script.  Whatever runs it by its path (timeout, exec, strace, python,
    # other scripts) gets the script.
    if [[ "$QEMU_IMG$QEMU_IMG_REAL" =~ ^[A-Za-z0-9_./+-]+$ ]]; then
        eval "function $QEMU_IMG {
            case \" \$* \" in
            *luks* | *encrypt*) command \"$QEMU_IMG\" \"\$@\" ;;
            *) command \"\$QEMU_IMG_REAL\" \"\$@\" ;;
            esac
        }"
    fi
fi
QEMU_IO=${QEMU_IO:-qemu-io}
QEMU_SYSTEM=${QEMU_SYSTEM:-qemu-system-x86_64}
export QIMG QIMG_NBD_PLUGIN QEMU_IMG QEMU_IO QEMU_SYSTEM

# Local time affects snapshot dates; make both tools agree.
export TZ=UTC LC_ALL=C

_scratch_base=${TMPDIR:-$IOTESTS_DIR/scratch}
[ -d "$_scratch_base" ] || mkdir -p "$_scratch_base"
# SCRATCH and its .bin (python3 below) by one mkdir, as mktemp -d would
# make SCRATCH: a new folder (mkdir fails on anything already there, a
# link included), mode 0700, a name no other test takes.
for _ in 1 2 3 4 5 6 7 8; do
    SCRATCH=$_scratch_base/qimg-iotest.$$.$RANDOM$RANDOM
    mkdir -m 700 -- "$SCRATCH" "$SCRATCH/.bin" 2>/dev/null && break
    SCRATCH=
done
[ -n "$SCRATCH" ] || SCRATCH=$(mktemp -d "$_scratch_base/qimg-iotest.XXXXXX") || exit 1
_cleanup() {
    cd / && rm -rf "$SCRATCH"
}
trap _cleanup EXIT
cd "$SCRATCH" || exit 1

# python3, started directly.  Through pyenv's shim (a bash script that runs
# pyenv first) each start costs ~0.4 s of CPU, and the tests start it
# hundreds of times.  Debian's own interpreter first: the Python packages
# scripts/install-deps.sh installs (python3-cryptography, python3-libvmdk)
# are its; else whichever python3 PATH finds, resolved to its binary.
if [ -x /usr/bin/python3 ]; then
    _python3=/usr/bin/python3
else
    _python3=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null)
fi
# No ln per test where none is needed (~8 ms of CPU each): PATH finds that
# binary itself, or iotests/run made one link to it for the whole run
# ($QIMG_IOTEST_BIN/python3).  (-ef: the same file; hash and BASH_CMDS:
# the shell's own PATH lookup, no subshell.)
if [ -n "$_python3" ]; then
    hash python3 2>/dev/null
    if [ "${BASH_CMDS[python3]:-}" -ef "$_python3" ]; then
        :
    elif [ -n "${QIMG_IOTEST_BIN:-}" ] && [ "$QIMG_IOTEST_BIN/python3" -ef "$_python3" ]; then
        PATH=$QIMG_IOTEST_BIN:$PATH
    else
        { [ -d "$SCRATCH/.bin" ] || mkdir -p "$SCRATCH/.bin"; } &&
            ln -sf "$_python3" "$SCRATCH/.bin/python3"
        PATH=$SCRATCH/.bin:$PATH
    fi
    export PATH
fi

_failures=0
_checks=0

# _verdict WORD [TEXT]: tell iotests/run how the test ended (see above).
_verdict() {
    [ -n "${QIMG_IOTEST_VERDICT:-}" ] && echo "$*" >"$QIMG_IOTEST_VERDICT"
    return 0
}

# in_ci: the CI environment (CI=true), where nothing may be skipped for a
# missing tool.
in_ci() {
    case "${CI:-}" in
    true | TRUE | True | 1) return 0 ;;
    *) return 1 ;;
    esac
}

# skip REASON: end the test as skipped (counted and shown by iotests/run).
skip() {
    echo "skipped: $*"
    _verdict skip "$*"
    exit 77
}

# missing REASON: a required tool is missing: skip, or fail under CI.
missing() {
    if in_ci; then
        echo "FAILED: $* (CI=true: a missing tool fails the test)"
        _verdict fail "$*"
        exit 1
    fi
    skip "$*"
}

# requires TOOL...: each tool must be available (qemu-img, qemu-io and
# qemu-system-x86_64 as QEMU_IMG, QEMU_IO, QEMU_SYSTEM; qimg as QIMG);
# otherwise skip, or fail under CI (missing).
requires() {
    local t
    for t in "$@"; do
        case "$t" in
        qimg) [ -x "$QIMG" ] || missing "qimg not built ($QIMG)" ;;
        qimg-nbd-plugin) [ -e "$QIMG_NBD_PLUGIN" ] ||
            missing "nbdkit-qimg-plugin.so not built ($QIMG_NBD_PLUGIN; needs nbdkit-plugin-dev)" ;;
        qemu-img) command -v "$QEMU_IMG" >/dev/null 2>&1 ||
            missing "qemu-img not found (QEMU_IMG=$QEMU_IMG)" ;;
        qemu-io) command -v "$QEMU_IO" >/dev/null 2>&1 ||
            missing "qemu-io not found (QEMU_IO=$QEMU_IO)" ;;
        qemu-system-x86_64) command -v "$QEMU_SYSTEM" >/dev/null 2>&1 ||
            missing "qemu-system-x86_64 not found (QEMU_SYSTEM=$QEMU_SYSTEM)" ;;
        *) command -v "$t" >/dev/null 2>&1 || missing "$t not found" ;;
        esac
    done
}

_fail() {
    _failures=$((_failures + 1))
    echo "FAILED: $*"
}

# The helpers below compare the outputs of thousands of tool runs.  A
# process costs ~8 ms of CPU here (fork and exec, more than qemu-img's own
# work on a small image), so they read and rewrite small text files with
# the shell's builtins rather than cat, sed and cmp, which made up much of
# the iotests' CPU time.

# same_bytes A B: files A and B hold the same bytes (as cmp -s: exit 0 if
# so).  Read by the shell; a file with a NUL byte (where the shell's read
# stops), or a missing one, goes to cmp.
same_bytes() {
    local a b
    [ -f "$1" ] && [ -f "$2" ] || { cmp -s "$1" "$2"; return; }
    # (read exits 1 at the end of the file, 0 at a NUL)
    IFS= read -r -d '' a <"$1" && { cmp -s "$1" "$2"; return; }
    IFS= read -r -d '' b <"$2" && { cmp -s "$1" "$2"; return; }
    [[ "$a" == "$b" ]]
}

# as_qimg_err VAR FILE: VAR = FILE's text (without its trailing newlines,
# as $(...)), each line's "qemu-img: " prefix read as "qimg: " and
# 'qemu-img --help' as 'qimg --help': qemu-img's errors as qimg words them.
as_qimg_err() {
    local _t
    _t=$'\n'$(<"$2")
    _t=${_t//$'\n'qemu-img: /$'\n'qimg: }
    _t=${_t#$'\n'}
    printf -v "$1" '%s' "${_t//"'qemu-img --help'"/"'qimg --help'"}"
}

# fail_bad_lines FILE RC WHAT [SUFFIX]: the report FILE of a checker that
# exited RC (a python3 that judges many cases at once): each "BAD TEXT"
# line fails the test as TEXT (TEXT: SUFFIX with SUFFIX), the other lines
# are shown indented; a nonzero RC without a BAD line fails as "WHAT: exit
# code RC".
fail_bad_lines() {
    local line bad=0
    while IFS= read -r line; do
        case $line in
        "BAD "*) _fail "${line#BAD }${4:+: $4}" && bad=1 ;;
        *) echo "    $line" ;;
        esac
    done <"$1"
    [ "$2" = 0 ] || [ $bad = 1 ] || _fail "$3: exit code $2"
}

# assert_eq DESC EXPECTED ACTUAL: strings must be equal (diff shown).
assert_eq() {
    _checks=$((_checks + 1))
    if [ "$2" != "$3" ]; then
        _fail "$1"
        diff -u --label expected --label actual <(printf '%s\n' "$2") \
            <(printf '%s\n' "$3") | head -n 60
        return 1
    fi
}

# assert_same_filtered DESC FILTER A B: files A and B read the same through
# the command FILTER (assert_eq of "$(FILTER <A)" and "$(FILTER <B)"); files
# with the same bytes read the same without running FILTER.  A FILTER with
# a builtin twin FILTER_var (FILTER_var VAR FILE: VAR = "$(FILTER <FILE)",
# no process) is read through the twin.
assert_same_filtered() {
    if same_bytes "$3" "$4"; then
        _checks=$((_checks + 1))
        return 0
    fi
    if declare -F "$2_var" >/dev/null; then
        local _fa _fb
        "$2_var" _fa "$3" && "$2_var" _fb "$4" && {
            assert_eq "$1" "$_fa" "$_fb"
            return
        }
    fi
    assert_eq "$1" "$("$2" <"$3")" "$("$2" <"$4")"
}

# io_filter: qemu-io's or qimg io's output with the timings and the tools'
# names made equal
io_filter() {
    sed -e 's/[0-9]* ops; [0-9/:. sec]* ([0-9/.inf]* [EPTGMKiBbytes]*\/sec and [0-9/.inf]* ops\/sec)/X ops; TIME/' \
        -e 's/^qemu-io: /qimg: /' -e 's/^qemu-img: /qimg: /'
}
# io_filter_var VAR FILE: VAR = "$(io_filter <FILE)" by the shell's
# builtins (two seds were ~16 ms of CPU in each same_as_qemu_io), through
# filter_lines.  The timings' regular expression is sed's, matched by the
# same (POSIX, leftmost-longest) rules: the first place its match occurs
# is where sed replaces it.
_io_time_re='[0-9]* ops; [0-9/:. sec]* \([0-9/.inf]* [EPTGMKiBbytes]*/sec and [0-9/.inf]* ops/sec\)'
_io_filter_line() {
    [[ "$_l" =~ $_io_time_re ]] && _l=${_l/"${BASH_REMATCH[0]}"/X ops; TIME}
    case $_l in
    "qemu-io: "*) _l="qimg: ${_l#qemu-io: }" ;;
    "qemu-img: "*) _l="qimg: ${_l#qemu-img: }" ;;
    esac
}
io_filter_var() { filter_lines "$1" "$2" _io_filter_line; }

# filter_lines VAR FILE EDIT: VAR = FILE's lines, each edited by the
# function EDIT (it changes $_l; it drops the line with _drop=1), without
# the trailing newlines, as "$(FILTER <FILE)" of a sed FILTER with the same
# edits gives them.  Returns 1 (VAR unset) for a file of more than 200
# lines or with a NUL byte, which sed reads faster or otherwise.
filter_lines() {
    local _t _l _o= _n=0 _drop
    IFS= read -r -d '' _t <"$2" && return 1 # (a NUL byte)
    [ -n "$_t" ] && [[ "$_t" != *$'\n' ]] && _t+=$'\n'
    while [ -n "$_t" ]; do
        _n=$((_n + 1))
        [ $_n -le 200 ] || return 1
        _l=${_t%%$'\n'*}
        _t=${_t#*$'\n'}
        _drop=
        "$3"
        [ -n "$_drop" ] || _o+=$_l$'\n'
    done
    while [[ "$_o" == *$'\n' ]]; do _o=${_o%$'\n'}; done
    printf -v "$1" '%s' "$_o"
}

# bounded SECS CMD...: run CMD as "timeout SECS CMD" would (the caller's
# stdin, stdout and stderr; CMD's exit code, or 124 once it ran SECS s and
# was sent SIGTERM -- SIGKILL 10 s later), without timeout's own process
# (~8 ms of CPU a run: helpers run thousands of tool runs).  CMD runs in a
# process substitution that execs it (so: no other process) with one more
# descriptor, 9, the write end of a pipe this shell reads with read -t:
# its end of file comes when CMD has ended (or has closed 9: then CMD is
# waited for without a bound).  BOUNDED_OUT=1 after a run that was killed.
bounded() {
    local _s=$1 _so _fd _pid _rc
    shift
    BOUNDED_OUT=
    exec {_so}>&1
    exec {_fd}< <(exec "$@" 9>&1 1>&"$_so" {_so}>&-)
    _pid=$!
    exec {_so}>&-
    read -r -t "$_s" -u "$_fd"
    if [ $? -gt 128 ]; then
        BOUNDED_OUT=1
        kill "$_pid" 2>/dev/null
        read -r -t 10 -u "$_fd"
        [ $? -gt 128 ] && kill -9 "$_pid" 2>/dev/null
    fi
    exec {_fd}<&-
    wait "$_pid"
    _rc=$?
    [ -z "$BOUNDED_OUT" ] || _rc=124
    return $_rc
}

# same_as_qemu_io DESC ARGS...: qemu-io ARGS and qimg io ARGS give the same
# exit code, stdout and stderr (through io_filter); each tool runs 30 s at
# most: one that runs longer fails the test (bounded above) on its own line
# (before, both tools' "timeout" exit codes, 124, compared equal).
# With IO_IMAGE=IMG and IO_FROM=BASE, each tool runs on a fresh copy of BASE
# at IMG, and the tools' images must hold the same guest data and check
# clean after (IO_RAW=1: a raw image, which has no check); with IO_SORT=1,
# stdout is compared sorted (aio completions).
same_as_qemu_io() {
    local desc=$1 qrc mrc
    shift
    [ -z "${IO_FROM:-}" ] || cp "$IO_FROM" "$IO_IMAGE" || exit 1
    bounded 30 "$QEMU_IO" "$@" >q.out 2>q.err
    qrc=$?
    [ -z "$BOUNDED_OUT" ] || _fail "$desc: qemu-io still ran after 30 s: killed it"
    if [ -n "${IO_FROM:-}" ]; then
        mv "$IO_IMAGE" "$IO_IMAGE.qemu" && cp "$IO_FROM" "$IO_IMAGE" || exit 1
    fi
    bounded 30 "$QIMG" io "$@" >m.out 2>m.err
    mrc=$?
    [ -z "$BOUNDED_OUT" ] || _fail "$desc: qimg io still ran after 30 s: killed it"
    if [ -n "${IO_SORT:-}" ]; then
        sort -o q.out q.out && sort -o m.out m.out
    fi
    assert_eq "$desc: exit code" "$qrc" "$mrc"
    assert_same_filtered "$desc: stdout" io_filter q.out m.out
    assert_same_filtered "$desc: stderr" io_filter q.err m.err
    if [ -n "${IO_FROM:-}" ]; then
        assert_rc "$desc: contents" 0 "$QEMU_IMG" compare -q "$IO_IMAGE.qemu" "$IO_IMAGE"
        [ -n "${IO_RAW:-}" ] || assert_rc "$desc: check" 0 "$QEMU_IMG" check -q "$IO_IMAGE"
    fi
}

# same_step DESC IMG-Q IMG-M QRC MRC: one step QEMU's tools ran on IMG-Q
# (output in q.out and q.err, exit code QRC) and qimg on a copy, IMG-M
# (m.out, m.err, MRC): the same exit code, output and errors (through
# STEP_FILTER, default io_filter), the same guest data, and IMG-M checks
# clean (no leaks).  Fails (returns 1) once any check of the test failed.
same_step() {
    local desc=$1 filter=${STEP_FILTER:-io_filter}
    assert_eq "$desc: exit code" "$4" "$5"
    assert_same_filtered "$desc: output" "$filter" q.out m.out
    assert_same_filtered "$desc: errors" "$filter" q.err m.err
    assert_rc "$desc: compare" 0 "$QEMU_IMG" compare "$2" "$3"
    assert_rc "$desc: check (no leaks)" 0 "$QEMU_IMG" check "$3"
    [ "$_failures" -eq 0 ]
}

# assert_rc DESC RC CMD...: CMD must exit with RC.
assert_rc() {
    local desc=$1 want=$2 rc
    shift 2
    "$@" >"$SCRATCH/.out" 2>&1
    rc=$?
    _checks=$((_checks + 1))
    if [ "$rc" != "$want" ]; then
        _fail "$desc: exit code $rc, expected $want"
        head -n 20 "$SCRATCH/.out"
        return 1
    fi
}

# traced DESC TRACE STRACE-OPTION... -- CMD...: CMD under "strace -f -qq
# -o TRACE STRACE-OPTION...", its stdout in traced.out, and a check that
# it exited 0 with nothing on stderr (strace's own complaints included):
# else a FAILED line with its exit code and stderr, and return 1.  A test
# that only counts calls in TRACE would otherwise see a failed run as a
# wrong count (or as a right one).
traced() {
    local desc=$1 trace=$2 sopts=() rc
    shift 2
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        sopts+=("$1")
        shift
    done
    shift
    strace -f -qq -o "$trace" "${sopts[@]}" "$@" >traced.out 2>traced.err
    rc=$?
    _checks=$((_checks + 1))
    if [ "$rc" != 0 ] || [ -s traced.err ]; then
        _fail "$desc: exit code $rc (0 wanted)$([ -s traced.err ] && echo ', stderr:')"
        head -n 20 traced.err
        return 1
    fi
}

# run_both ARGS...: run "qemu-img ARGS" and "qimg ARGS" in the scratch
# folder.  Results: Q_OUT Q_ERR Q_RC (qemu-img) and M_OUT M_ERR M_RC (qimg);
# in qemu-img's stderr, "qemu-img:" line prefixes and "Try 'qemu-img --help'"
# read "qimg".
run_both() {
    "$QEMU_IMG" "$@" >"$SCRATCH/.q.out" 2>"$SCRATCH/.q.err"
    Q_RC=$?
    "$QIMG" "$@" >"$SCRATCH/.m.out" 2>"$SCRATCH/.m.err"
    M_RC=$?
    Q_OUT=$(<"$SCRATCH/.q.out")
    as_qimg_err Q_ERR "$SCRATCH/.q.err"
    M_OUT=$(<"$SCRATCH/.m.out")
    M_ERR=$(<"$SCRATCH/.m.err")
}

# same_as_qemu ARGS...: stdout (byte for byte) and exit code must match.
same_as_qemu() {
    run_both "$@"
    _checks=$((_checks + 1))
    if ! same_bytes "$SCRATCH/.q.out" "$SCRATCH/.m.out"; then
        _fail "stdout of '$*' differs (- qemu-img, + qimg)"
        diff -u --label qemu-img --label qimg "$SCRATCH/.q.out" "$SCRATCH/.m.out" |
            head -n 60
        return 1
    fi
    if [ "$Q_RC" != "$M_RC" ]; then
        _fail "exit code of '$*': qemu-img $Q_RC, qimg $M_RC"
        echo "qimg stderr: $M_ERR"
        return 1
    fi
}

# mk_qcow2 NAME SIZE OPTS [QEMU-IO-CMD...]: qemu-img create -f qcow2 -o
# OPTS (a leading comma dropped; empty: none), then the qemu-io commands.
mk_qcow2() {
    local name=$1 size=$2 opts=$3
    shift 3
    opts=${opts#,}
    "$QEMU_IMG" create -q -f qcow2 ${opts:+-o "$opts"} "$name" "$size" || return 1
    local args=()
    for w in "$@"; do args+=(-c "$w"); done
    [ ${#args[@]} -eq 0 ] || "$QEMU_IO" "${args[@]}" "$name" >/dev/null
}

# wait_sock SOCKET [PIDFILE]: wait up to 60 s for a server's Unix socket
# (and its pid file) to appear.  The socket may be there before the server
# serves (and heeds SIGTERM): nbd_ready waits for that.
wait_sock() {
    # (a daemonising nbdkit binds its socket before it forks and writes
    # its pid file after: a caller that kills by the pid file waits for it)
    # Up to 60 s: on a loaded machine python3 alone took 3 s to start, and
    # a server that starts late is not a failure of the client under test.
    local _i
    for ((_i = 0; _i < 1200; _i++)); do
        [ -S "$1" ] && { [ -z "${2:-}" ] || [ -s "$2" ]; } && return 0
        _nap 0.05
    done
    return 1
}

# _nap SECS: sleep SECS (0.05) without a sleep process (~8 ms of CPU each;
# the polls below nap every 50 ms): read -t on a pipe that never has data
# (this shell holds its write end too), opened at the first nap.
_nap_fd=
_nap() {
    [ -n "$_nap_fd" ] || exec {_nap_fd}<> <(:)
    read -r -t "$1" -u "$_nap_fd"
    return 0
}

# holds FILE TEXT: FILE holds TEXT (as grep -qF TEXT FILE, for a text
# file; read by the shell, for polls).
holds() {
    local _t=
    { IFS= read -r -d '' _t <"$1"; } 2>/dev/null
    [[ "$_t" == *"$2"* ]]
}

# running PID: the process is there and not a zombie (a daemon's parent
# may reap it seconds after it ended).  (/proc/PID/stat read by the shell:
# the callers poll it every 50 ms.)
running() {
    local st
    { IFS= read -r st <"/proc/$1/stat"; } 2>/dev/null || return 1
    st=${st##*) }
    [ -n "$st" ] && [ "${st%% *}" != Z ]
}

# nbd_ready SOCKET|URI [PID [SECS]]: wait up to SECS (60) s until an NBD
# server answers a handshake there (nbdinfo --list; SOCKET: the path of a
# Unix socket), not only until its socket exists: qemu-nbd 7.2 makes its
# socket, then opens its image, and serves only after that -- and a SIGTERM
# it gets in between is lost, it runs on (iotest 062 hung on its wait after
# such a kill; iotests/tests/217).  Once it answered, SIGTERM ends it.  With
# PID, stops as soon as that process ended.  Returns 1 after a FAILED line
# if no server answered: callers end the test (nbd_ready ... || finish)
# rather than send clients to a server that may never serve them.
nbd_ready() {
    local uri=$1 pid=${2:-} secs=${3:-60} start=$SECONDS
    case $uri in
    nbd*) ;;
    /*) uri="nbd+unix:///?socket=$uri" ;;
    *) uri="nbd+unix:///?socket=$PWD/$uri" ;;
    esac
    _checks=$((_checks + 1))
    while :; do
        bounded 10 nbdinfo --list "$uri" >/dev/null 2>&1 </dev/null && return 0
        if [ -n "$pid" ] && ! running "$pid"; then
            _fail "the NBD server at $uri (pid $pid) ended before it answered"
            return 1
        fi
        [ $((SECONDS - start)) -lt "$secs" ] || break
        _nap 0.05
    done
    _fail "no NBD server answered at $uri within $secs s${pid:+ (pid $pid still runs)}"
    return 1
}

# stop_server PID [NAME [SECS]]: SIGTERM a server and wait up to SECS (30)
# s for it to end (and reap it, if this shell started it).  One still
# running then is SIGKILLed and fails the test (a FAILED line, return 1)
# instead of hanging it on a wait.
stop_server() {
    local pid=$1 secs=${3:-30} start=$SECONDS
    kill "$pid" 2>/dev/null
    while running "$pid" && [ $((SECONDS - start)) -lt "$secs" ]; do
        _nap 0.05
    done
    if running "$pid"; then
        kill -9 "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        # SIGKILL is delivered, not done, when kill returns, and wait
        # reaps nothing in a subshell ($(stop_server ...)): wait up to 10
        # s until it has ended (a zombie has), so "killed it" is true
        # (iotest 217 once saw it still running right after)
        local _i
        for ((_i = 0; _i < 1000; _i++)); do
            running "$pid" || break
            _nap 0.01
        done
        _checks=$((_checks + 1))
        _fail "${2:-the server} (pid $pid) still ran $secs s after SIGTERM: killed it"
        return 1
    fi
    wait "$pid" 2>/dev/null
    return 0
}

# nbd_listening SOCKET PIDFILE PID [SECS]: for a server that takes one
# client and then ends (qimg nbd or qemu-nbd without -t, started with
# --pid-file PIDFILE), where nbd_ready's handshake would be that client:
# wait up to SECS (60) s until PIDFILE is written.  nbdkit writes it just
# after listen() on its socket, qemu-nbd 7.2 after listen() and its image's
# open; a client that connects from then on waits in the listen queue and
# is served.  The socket alone (wait_sock) is there from bind(), and a
# client that came before listen() was refused, and the server then waited
# for one forever (iotests 100, 209).  PIDFILE must not exist before.
# Returns 1 after a FAILED line if PID ended first or nothing came in time:
# callers end the test (... || finish).
nbd_listening() {
    local sock=$1 pidfile=$2 pid=$3 secs=${4:-60} start=$SECONDS
    _checks=$((_checks + 1))
    while ! { [ -S "$sock" ] && [ -s "$pidfile" ]; }; do
        if ! running "$pid"; then
            _fail "the NBD server for $sock (pid $pid) ended before it listened"
            return 1
        fi
        if [ $((SECONDS - start)) -ge "$secs" ]; then
            _fail "the NBD server for $sock (pid $pid) did not listen within $secs s"
            return 1
        fi
        _nap 0.05
    done
}

# server_left PID [NAME [SECS]]: a server without -t ends once its one
# client left: wait up to SECS (60) s for that (and reap it, if this shell
# started it).  One still running then (its client never came, or never
# left) is stopped by stop_server and fails the test (a FAILED line,
# return 1) instead of hanging it on a wait.  LEFT_RC: the exit status of a
# server that ended (127 if this shell did not start it).
server_left() {
    local pid=$1 secs=${3:-60} start=$SECONDS
    while running "$pid" && [ $((SECONDS - start)) -lt "$secs" ]; do
        _nap 0.05
    done
    _checks=$((_checks + 1))
    if running "$pid"; then
        _fail "${2:-the server} (pid $pid) still ran $secs s after its client should have left: stopping it"
        stop_server "$pid" "${2:-the server}" 10
        return 1
    fi
    wait "$pid" 2>/dev/null
    LEFT_RC=$?
    return 0
}

# tcp_port: a TCP port for a test's server on 127.0.0.1: below the kernel's
# ephemeral range (ip_local_port_range, 32768 up here), so no client
# connection of a test running beside this one holds it, and with nothing
# listening on it now.  iotests run two at a time: the random start keeps
# two tests from taking the same port.
tcp_port() {
    local lo=20000 hi=32767 p _ _i
    read -r hi _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || hi=32768
    hi=$((hi - 1))
    [ "$hi" -gt "$lo" ] || hi=$((lo + 9999))
    for ((_i = 0; _i < 50; _i++)); do
        p=$((lo + (RANDOM * 32768 + RANDOM) % (hi - lo + 1)))
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return 0; }
    done
    echo "$p"
}

# gone PID: wait up to 10 s for a process to end.
gone() {
    local _i
    for ((_i = 0; _i < 200; _i++)); do
        kill -0 "$1" 2>/dev/null || return 0
        _nap 0.05
    done
    return 1
}

# proc_locks FILE: the lines of /proc/locks on FILE. /proc/locks names a
# file by device and inode ("fe:00:1234"); matching the inode alone also
# catches locks on another file system's file of the same inode number.
# Not a snapshot: while other processes lock or unlock anything, a reading
# can list a lock twice or miss one (iotests/ofd_locks.py says why).  Good
# for "is byte B held yet?" polls; to tell which bytes are held, lock_bytes.
proc_locks() {
    local id
    id=$(stat -c '%Hd %Ld %i' "$1") || return 1
    # shellcheck disable=SC2086
    id=$(printf '%02x:%02x:%s' $id)
    awk -v id="$id" '$6 == id' /proc/locks
}

# lock_bytes FILE: the bytes of FILE anyone holds a lock on, ascending and
# space-separated ("100 201 203"; "" when none), as the kernel holds them at
# one moment (iotests/ofd_locks.py: F_OFD_GETLK, not /proc/locks).  A set:
# a byte two descriptions hold is listed once.
lock_bytes() {
    python3 "$IOTESTS_DIR/ofd_locks.py" "$1"
}

# hold_image IMG: start qemu-io holding IMG open read-write (its sleep
# command) in the background, HOLDER=its pid, and wait until /proc/locks
# shows the lock of its write permission on IMG (QEMU's byte 101) --
# watching the locks, not opening IMG, which would race with qemu-io's own
# open.  Returns 1 after a failed check if it never holds it.  Kill
# $HOLDER when done.
hold_image() {
    "$QEMU_IO" -c 'sleep 60000' "$1" >"$SCRATCH/.hold.out" 2>&1 &
    HOLDER=$!
    local _i
    for ((_i = 0; _i < 200; _i++)); do
        proc_locks "$1" | awk '$7 <= 101 && $8 >= 101 { f = 1 } END { exit !f }' &&
            return 0
        kill -0 "$HOLDER" 2>/dev/null || break
        _nap 0.05
    done
    _checks=$((_checks + 1))
    _fail "qemu-io did not hold $1: $(cat "$SCRATCH/.hold.out")"
    return 1
}

# sparse_cmp A B: like cmp -s (exit 0 if equal, 1 with a line saying where
# if not), but what is a hole in both files is not read, so comparing the
# raw images of sparse multi-GiB disks costs what their data costs.  Files
# under 64 MiB are compared by cmp itself (no Python start per check).
sparse_cmp() {
    local -a sz
    mapfile -t sz < <(stat -c %s -- "$1" "$2" 2>/dev/null)
    if [ "${#sz[@]}" = 2 ] && [ "${sz[0]}" -lt 67108864 ] && [ "${sz[1]}" -lt 67108864 ]; then
        cmp -- "$1" "$2" 2>&1
        return
    fi
    python3 "$IOTESTS_DIR/sparse_cmp.py" "$1" "$2"
}

# same_file DESC EXPECTED ACTUAL: a check that file ACTUAL has the bytes of
# EXPECTED (sparse_cmp).
same_file() {
    _checks=$((_checks + 1))
    if ! sparse_cmp "$2" "$3"; then
        _fail "$1: $3 differs from $2 ($(stat -c %s "$2") vs $(stat -c %s "$3") bytes)"
        return 1
    fi
}

# vm_state_size IMG NAME: snapshot NAME's vm-state-size per qemu-img info.
vm_state_size() {
    "$QEMU_IMG" info --output=json "$1" | python3 -c '
import json, sys
for s in json.load(sys.stdin).get("snapshots", []):
    if s["name"] == sys.argv[1]:
        print(s["vm-state-size"])' "$2"
}

# qemu_vmstate_read IMG NAME OFF LEN OUT: bytes [OFF, OFF+LEN) of the VM
# state of snapshot NAME as QEMU's own load path reads them: on a copy of
# IMG, "qemu-img snapshot -a NAME", then "qemu-io -c 'read -b -v'" (whole
# 512-byte sectors, cut back to LEN) parsed from its hex dump into OUT.
qemu_vmstate_read() {
    local img=$1 name=$2 off=$3 len=$4 out=$5
    local first=$((off / 512 * 512))
    local end=$(((off + len + 511) / 512 * 512))
    cp "$img" "$SCRATCH/.qemu-vmstate.qcow2" || return 1
    "$QEMU_IMG" snapshot -a "$name" "$SCRATCH/.qemu-vmstate.qcow2" || return 1
    "$QEMU_IO" -c "read -b -v $first $((end - first))" "$SCRATCH/.qemu-vmstate.qcow2" |
        python3 -c '
import sys
skip, size = int(sys.argv[1]), int(sys.argv[2])
out = bytearray()
for line in sys.stdin.buffer:
    # "0000fe00:  xx xx ... xx  ascii": 16 bytes of hex from column 11
    if len(line) > 58 and line[8:11] == b":  ":
        out += bytes.fromhex(line[11:58].decode())
sys.stdout.buffer.write(bytes(out[skip:skip + size]))' "$((off - first))" "$len" >"$out"
    local rc=$?
    rm -f "$SCRATCH/.qemu-vmstate.qcow2"
    return $rc
}

# set_u64 IMG OFFSET VALUE: poke a big-endian 64-bit VALUE into IMG (python3)
set_u64() {
    python3 - "$@" <<'PY'
import struct, sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2], 0))
    f.write(struct.pack(">Q", int(sys.argv[3], 0)))
PY
}

# corrupt_bit IMG: qemu-img info's "corrupt:" line of a qcow2 IMG
corrupt_bit() {
    "$QEMU_IMG" info "$1" | grep 'corrupt:'
}

# qi ARGS...: run qemu-img ARGS to set up a test; on failure print its
# output and end the test.
qi() {
    if ! "$QEMU_IMG" "$@" >.qi.out 2>&1; then
        echo "setup: qemu-img $* failed:"
        cat .qi.out
        exit 1
    fi
}

# dirty_map IMG NAME: the dirty extents of bitmap NAME as QEMU sees them
# (qemu-nbd -r -B NAME, nbdinfo --map), one "offset length 1  dirty" line
# each; an error line when qemu-nbd refuses the bitmap.
dirty_map() {
    local sock=$SCRATCH/dm.$$.sock pidf=$SCRATCH/dm.$$.pid
    rm -f "$sock" "$pidf"
    # (</dev/null: neither may eat a caller's here-document)
    if qemu-nbd --fork --pid-file="$pidf" -r -f qcow2 -B "$2" -k "$sock" "$1" \
        </dev/null 2>"$SCRATCH/dm.err"; then
        nbdinfo --map="qemu:dirty-bitmap:$2" "nbd+unix:///?socket=$sock" </dev/null |
            awk '$3 == 1'
        local pid='' _i
        read -r pid <"$pidf"
        kill "$pid" 2>/dev/null
        # gone, or a zombie (--fork's daemon is reaped by whoever is pid 1,
        # maybe seconds later; a zombie holds no lock)
        for ((_i = 0; _i < 200; _i++)); do
            running "$pid" || break
            _nap 0.01
        done
    else
        echo "qemu-nbd: $(cat "$SCRATCH/dm.err")"
    fi
    rm -f "$sock" "$pidf"
}

# qio IMG CMD...: run qemu-io -c CMD... on IMG to set up a test; on failure
# (or an error in its output) print the output and end the test.
qio() {
    local img=$1 args=() c
    shift
    for c in "$@"; do
        args+=(-c "$c")
    done
    local out
    "$QEMU_IO" "${args[@]}" "$img" >.qio.out 2>&1
    local rc=$?
    out=$(<.qio.out)
    out=${out,,} # (grep -i 'error\|failed', without a grep)
    if [ $rc != 0 ] || [[ "$out" == *error* || "$out" == *failed* ]]; then
        echo "setup: qemu-io $* on $img failed:"
        cat .qio.out
        exit 1
    fi
}

# settle [--evict] FILE...: make the map of FILE's unwritten (fallocated,
# never written) extents independent of the page cache: what SEEK_DATA
# answers there depends on which pages some read left cached (ext4), so
# two maps of one image can differ.  Writes their zeroes (they map as
# data), or with --evict drops the file's cached pages (they map as holes
# until read).  Bytes unchanged; missing files skipped (iotests/settle.py).
settle() {
    python3 "$IOTESTS_DIR/settle.py" "$@"
}

# alloc_of [--unit N] FILE: the bytes FILE's data holds on disk (with
# --unit N: how many N-byte pieces of FILE hold any), from its extents after
# a sync (iotests/alloc.py): what a test means by "allocated" or "given
# back".  Not du or st_blocks: they also count ext4's extent-tree blocks,
# which come and go as extents split or merge (a write into an unwritten
# extent splits it), and, before writeback, delayed allocation's
# reservations.
alloc_of() {
    python3 "$IOTESTS_DIR/alloc.py" "$@"
}

# map_flags IMG [FMT]: qemu-img's allocation map of IMG (format FMT,
# default qcow2) without host offsets, adjacent extents with the same flags
# merged: comparable between images whose host layouts differ.  IMG is
# settled first: a qcow2 data cluster's "zero" flag comes from the file's
# extents, a raw image's data/zero flags are the file's extents, and the
# tests compare maps after reading the images (convert, compare), which
# caches pages of unwritten extents (settle above).  So raw images are
# evicted (an unwritten extent maps as zeroes, as it reads), others are
# written (a data cluster stays data).
map_flags() {
    # (iotests/map_flags.py: the settle and the parse in one python3)
    python3 "$IOTESTS_DIR/map_flags.py" "$1" "${2:-qcow2}"
}

# same_map DESC A B [FMT]: assert_eq of "$(map_flags A FMT)" and
# "$(map_flags B FMT)", both maps made by one python3 (~40 ms of CPU a
# start).  A map that cannot be made fails the check, as it fails the
# comparison of map_flags' outputs.
same_map() {
    local out fmt=${4:-qcow2}
    out=$'\n'$(python3 "$IOTESTS_DIR/map_flags.py" "$2" "$fmt" "$3" "$fmt")$'\n'
    if [[ "$out" != *$'\n--\n'* ]]; then
        _checks=$((_checks + 1))
        _fail "$1: no maps of $2 and $3"
        printf '%s\n' "${out:1}" | head -n 20
        return 1
    fi
    local a=${out%%$'\n--\n'*} b=${out#*$'\n--\n'}
    a=${a#$'\n'} b=${b%$'\n'}
    assert_eq "$1" "$a" "$b"
}

# same_as_qemu_err ARGS...: like same_as_qemu, and stderr must match too.
same_as_qemu_err() {
    same_as_qemu "$@" || return 1
    _checks=$((_checks + 1))
    if [ "$Q_ERR" != "$M_ERR" ]; then
        _fail "stderr of '$*' differs (- qemu-img, + qimg)"
        diff -u --label qemu-img --label qimg <(printf '%s\n' "$Q_ERR") \
            <(printf '%s\n' "$M_ERR") | head -n 30
        return 1
    fi
}

# expect_error DESC ARGS...: qimg must fail like qemu-img (same exit code,
# nothing on stdout, a "qimg: " message on stderr).
expect_error() {
    local desc=$1
    shift
    run_both "$@"
    _checks=$((_checks + 1))
    if [ "$Q_RC" = 0 ] || [ "$M_RC" != "$Q_RC" ] || [ -n "$M_OUT" ] ||
        [[ "$M_ERR" != qimg:* ]]; then
        _fail "$desc: '$*': qemu-img rc $Q_RC, qimg rc $M_RC"
        echo "qimg stdout: $M_OUT"
        echo "qimg stderr: $M_ERR"
        echo "qemu-img stderr: $Q_ERR"
        return 1
    fi
}

# finish: exit with the verdict; call at the end of every test.  A test
# that made no check fails: it would pass without testing anything.
finish() {
    if [ "$_failures" -gt 0 ]; then
        echo "$_failures of $_checks checks failed"
        _verdict fail "$_failures of $_checks checks failed"
        exit 1
    fi
    if [ "$_checks" -eq 0 ]; then
        echo "FAILED: no checks were made"
        _verdict fail "no checks were made"
        exit 1
    fi
    echo "$_checks checks passed"
    _verdict pass "$_checks checks"
    exit 0
}

# same_as_qemu_err_kdf ARGS...: same_as_qemu_err for a qemu-img command that
# builds a LUKS header (create, measure, convert -O luks): its PBKDF2
# benchmark reads CPU time in milliseconds and fails now and then on a busy
# machine ("Unable to get accurate CPU usage"); such a run is tried again.
same_as_qemu_err_kdf() {
    for _ in 1 2 3 4 5 6 7 8; do
        run_both "$@"
        [[ "$Q_ERR" == *"Unable to get accurate CPU usage"* ]] || break
    done
    _checks=$((_checks + 2))
    if [ "$Q_OUT" != "$M_OUT" ] || [ "$Q_RC" != "$M_RC" ] || [ "$Q_ERR" != "$M_ERR" ]; then
        _fail "'$*': qemu-img and qimg differ"
        diff -u --label qemu-img --label qimg <(printf '%s\n%s\nrc %s\n' "$Q_OUT" "$Q_ERR" "$Q_RC") \
            <(printf '%s\n%s\nrc %s\n' "$M_OUT" "$M_ERR" "$M_RC") | head -n 30
    fi
}
