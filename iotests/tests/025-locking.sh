#!/bin/bash
# Image locks against real QEMU (block/lock.c, DESIGN.md rule 7).
#
#   1. A running qemu-system-x86_64 (-M none, no guest: it only holds the
#      image) stops every qimg command that writes (io, snapshot -c/-a/-d,
#      resize, check -r, vmstate save/load --apply, convert into it, create
#      over it, bench -w) with qemu-img's (or qemu-io's) message and exit
#      code, and the image is left unchanged; the read-only commands fail
#      like qemu-img's and work with -U like qemu-img's.
#   2. The reverse: while qimg io holds an image, qemu-io and qemu-img (and
#      QEMU itself) are refused as they would be by another QEMU, -U works,
#      qimg against qimg too; readers share with readers.
#   3. qimg holds the same bytes in /proc/locks as QEMU for the same kind of
#      open: image file, backing file, external data file, raw images; and
#      (under strace) the short-lived commands take the same
#      locks as qemu-img's, create included.
#
# QEMU 7.2's bytes (100 + i: holds permission i, 200 + i: does not share it;
# 0 consistent read, 1 write, 3 resize), as measured for this test:
#   qcow2 read-write (VM, qemu-io, qemu-img)     100 101 103 201 203
#   qcow2 read-only (VM readonly=on, qemu-io -r) 100 201 203
#   qcow2 -U                                     100
#   qemu-img info / info -U                      201 203 / none
#   backing file of an open overlay              as qcow2 read-only (-U: 100)
#   data file: read-write / read-only / -U       100 101 103 203 / 100 203 / 100
#   raw: read-write / read-only / info           100 101 / 100 / none
#   raw resize (qemu-img resize, qemu-io truncate) 100 101 103
#   convert's source (any file of its chain)     + 201 203
#   create (while the file is created)           101 103 203
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io qemu-system-x86_64 python3 timeout md5sum strace

VM_PID= HOLD_PID=
trap 'kill $VM_PID $HOLD_PID 2>/dev/null; _cleanup' EXIT

# held FILE: the lock bytes anyone holds on FILE (lock_bytes: one look at
# the kernel's locks of FILE; read from /proc/locks, the bytes of a lone
# holder of 100 201 203 once read "100 100 201 201 203" while other tests
# locked their images, see iotests/tests/216).
held() {
    lock_bytes "$1"
}

# wait_held FILE [BYTE]: until someone holds lock bytes on FILE (BYTE among
# them) and they stay the same for 0.3 s (10 s at most).
wait_held() {
    local i h last= same=0
    for i in $(seq 100); do
        h=$(held "$1")
        if [ -n "$h" ] && [[ " $h " == *" ${2:-$h} "* ]] && [ "$h" = "$last" ]; then
            same=$((same + 1))
            [ "$same" -ge 3 ] && return 0
        else
            same=0
        fi
        last=$h
        sleep 0.1
    done
    echo "setup: no locks appeared on $1 (${2:-any byte}): '$h'"
    exit 1
}

# wait_for TEXT FILE: until FILE contains TEXT (10 s at most).
wait_for() {
    local i
    for i in $(seq 100); do
        grep -q -F -- "$1" "$2" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "setup: '$1' did not appear in $2:"
    cat "$2"
    exit 1
}

wait_free() {
    local i
    for i in $(seq 100); do
        [ -z "$(held "$1")" ] && return 0
        sleep 0.1
    done
    _fail "locks on $1 not released: $(held "$1")"
}

# vm_start IMG [DRIVE OPTIONS]: QEMU holds IMG (no guest, no devices).
vm_start() {
    timeout 300 qemu-system-x86_64 -M none -display none -nodefaults -monitor none \
        -serial none -drive "file=$1,if=none,id=d0,format=qcow2$2" >vm.out 2>&1 &
    VM_PID=$!
    wait_held "$1"
}

vm_stop() {
    kill "$VM_PID" 2>/dev/null
    wait "$VM_PID" 2>/dev/null
    wait_free "$1"
}

# hold NAME FILE CMD...: run CMD (qimg io or qemu-io without -c, reading
# commands from a fifo) in the background until release; wait until it has
# opened the image (its prompt is out) and FILE is locked.
hold() {
    local name=$1 file=$2
    shift 2
    rm -f "$name.fifo"
    mkfifo "$name.fifo"
    "$@" <"$name.fifo" >"$name.out" 2>&1 &
    HOLD_PID=$!
    exec 3>"$name.fifo"
    wait_for "io> " "$name.out"
    wait_held "$file"
}

release() {
    (echo quit >&3) 2>/dev/null # a subshell: no SIGPIPE here if it is gone
    exec 3>&-
    wait "$HOLD_PID"
    HOLD_RC=$?
}

# The bytes CMD holds on each of FILES while it runs (see hold): "F[bytes] ...".
held_by() {
    local files=$1 f out=""
    shift
    hold h "${files%% *}" "$@"
    for f in $files; do
        out="$out $f[$(held "$f")]"
    done
    release
    # the next held_by must count its own holder's bytes only.  (The
    # "locks outliving their process" this wait was added for were torn
    # /proc/locks readings, see held: read with lock_bytes, no lock was
    # left after any of 80 exits of qemu-io and qimg io under load.)
    for f in $files; do
        wait_free "$f" # (its FAILED line lands in the output compared)
    done
    echo "${out# }"
}

# QEMU iotests' _filter_qemu_io and the program names.
filter_io() {
    sed -e 's/[0-9]* ops; [0-9/:. sec]* ([0-9/.inf]* [EPTGMKiBbytes]*\/sec and [0-9/.inf]* ops\/sec)/X ops/' \
        -e 's/^qemu-io: /qimg: /' -e 's/^qemu-img: /qimg: /'
}

# io_same DESC ARGS...: qemu-io ARGS and qimg io ARGS: same exit code,
# stdout and stderr (filtered).
io_same() {
    local desc=$1 qrc mrc
    shift
    "$QEMU_IO" "$@" >q.out 2>q.err </dev/null
    qrc=$?
    "$QIMG" io "$@" >m.out 2>m.err </dev/null
    mrc=$?
    assert_eq "$desc: exit code" "$qrc" "$mrc"
    assert_eq "$desc: stdout" "$(filter_io <q.out)" "$(filter_io <m.out)"
    assert_eq "$desc: stderr" "$(filter_io <q.err)" "$(filter_io <m.err)"
}

# refused_like_qemu ARGS...: qemu-img and qimg both fail, with the same
# message and exit code (and stdout).
refused_like_qemu() {
    same_as_qemu_err "$@" || return 1
    _checks=$((_checks + 1))
    if [ "$Q_RC" = 0 ] || [[ "$Q_ERR" != *" lock"* && "$Q_ERR" != *force-share* ]]; then
        _fail "'$*' was not refused by qemu-img (rc $Q_RC): $Q_ERR"
    fi
}

# qimg_refused DESC WANT CMD...: qimg CMD exits 1 with message WANT.
qimg_refused() {
    local desc=$1 want=$2 rc
    shift 2
    "$QIMG" "$@" >m.out 2>m.err </dev/null
    rc=$?
    assert_eq "$desc: exit code" 1 "$rc"
    assert_eq "$desc: message" "$want" "$(cat m.err)"
}

in_use() { # in_use MODE IMG: qemu-img's message for a conflict
    if [ "$1" = w ]; then
        printf 'Failed to get "write" lock\nIs another process using the image [%s]?' "$2"
    else
        printf 'Failed to get shared "write" lock\nIs another process using the image [%s]?' "$2"
    fi
}

qi create -q -f qcow2 x.qcow2 64M
qio x.qcow2 'write -P 0x11 0 64k' 'write -P 0x22 1M 64k'
qi snapshot -c s0 x.qcow2
head -c 65536 /dev/urandom >state.bin
qio x.qcow2 'write -b -P 0x33 0 64k' # x.qcow2 also has a vmstate area
qi create -q -f raw src.raw 64M
qi create -q -f qcow2 other.qcow2 64M

# ---- 1. a running VM stops qimg ----

vm_start x.qcow2
assert_eq "VM read-write: bytes" "100 101 103 201 203" "$(held x.qcow2)"
before=$(md5sum <x.qcow2)

# writers: qemu-img's message and exit code (run_both runs both tools)
refused_like_qemu snapshot -c s1 x.qcow2
refused_like_qemu snapshot -a s0 x.qcow2
refused_like_qemu snapshot -d s0 x.qcow2
refused_like_qemu resize x.qcow2 +1M
refused_like_qemu resize -f qcow2 --shrink x.qcow2 32M
refused_like_qemu check -r all x.qcow2
refused_like_qemu check -r leaks x.qcow2
refused_like_qemu check -U -r all x.qcow2
refused_like_qemu convert -n -f raw -O qcow2 src.raw x.qcow2
refused_like_qemu convert -f raw -O qcow2 src.raw x.qcow2
refused_like_qemu create -f qcow2 x.qcow2 64M
refused_like_qemu create -f raw x.qcow2 1M
refused_like_qemu bench -w -c 1 x.qcow2
refused_like_qemu bench -U -w -c 1 x.qcow2
# qemu-io's
io_same "io write" -c 'write -P 0x44 0 4k' x.qcow2
io_same "io truncate" -c 'truncate 1M' x.qcow2
io_same "io -U (read-write)" -U -c 'read 0 4k' x.qcow2
# qimg's own writers say what qemu-img says for an image in use
qimg_refused "vmstate save" "qimg: Could not open 'x.qcow2': $(in_use w x.qcow2)" \
    vmstate save x.qcow2 s2 state.bin
qimg_refused "vmstate load --apply" "qimg: Could not open 'x.qcow2': $(in_use w x.qcow2)" \
    vmstate load --apply x.qcow2 s0 out.bin
assert_eq "the refused commands left the image alone" "$before" "$(md5sum <x.qcow2)"

# readers: refused like qemu-img's, and -U works like qemu-img -U
refused_like_qemu info x.qcow2
refused_like_qemu info --output=json x.qcow2
refused_like_qemu map x.qcow2
refused_like_qemu check x.qcow2
refused_like_qemu snapshot -l x.qcow2
refused_like_qemu compare x.qcow2 other.qcow2
refused_like_qemu compare other.qcow2 x.qcow2
refused_like_qemu convert -O raw x.qcow2 out.raw
refused_like_qemu bench -c 1 x.qcow2
qimg_refused "vmstate load" "qimg: Could not open 'x.qcow2': $(in_use r x.qcow2)" \
    vmstate load x.qcow2 s0 out.bin
io_same "io -r" -r -c 'read -P 0x11 0 4k' x.qcow2
same_as_qemu info -U x.qcow2
same_as_qemu info -U --output=json x.qcow2
same_as_qemu map -U --output=json x.qcow2
same_as_qemu check -U x.qcow2
same_as_qemu snapshot -U -l x.qcow2
same_as_qemu compare -U x.qcow2 x.qcow2
same_as_qemu convert -U -O raw x.qcow2 out.raw
io_same "io -r -U" -r -U -c 'read -P 0x11 0 4k' -c 'read -P 0x22 1M 4k' x.qcow2
assert_eq "still unchanged" "$before" "$(md5sum <x.qcow2)"
vm_stop x.qcow2

# a read-only VM shares reading, not writing
vm_start x.qcow2 ,readonly=on
assert_eq "VM read-only: bytes" "100 201 203" "$(held x.qcow2)"
same_as_qemu info x.qcow2
same_as_qemu check x.qcow2
io_same "io -r under a read-only VM" -r -c 'read -P 0x11 0 4k' x.qcow2
io_same "io write under a read-only VM" -c 'write 0 4k' x.qcow2
refused_like_qemu snapshot -c s1 x.qcow2
vm_stop x.qcow2

# ---- 2. qimg holds the image ----

hold m x.qcow2 "$QIMG" io x.qcow2
mine=$(held x.qcow2)
assert_eq "qimg io: the bytes of a read-write QEMU" "100 101 103 201 203" "$mine"
"$QEMU_IO" -c 'write 0 4k' x.qcow2 >q.out 2>q.err
assert_eq "qemu-io write refused: exit code" 1 "$?"
assert_eq "qemu-io write refused: message" \
    "qemu-io: can't open device x.qcow2: $(in_use w x.qcow2)" "$(cat q.err)"
"$QEMU_IMG" info x.qcow2 >q.out 2>q.err
assert_eq "qemu-img info refused: exit code" 1 "$?"
assert_eq "qemu-img info refused: message" \
    "qemu-img: Could not open 'x.qcow2': $(in_use r x.qcow2)" "$(cat q.err)"
assert_rc "qemu-img info -U works" 0 "$QEMU_IMG" info -U x.qcow2
assert_rc "qemu-io -r -U reads" 0 "$QEMU_IO" -r -U -c 'read -P 0x11 0 4k' x.qcow2
timeout 60 qemu-system-x86_64 -M none -display none -nodefaults -monitor none \
    -serial none -drive file=x.qcow2,if=none,id=d0,format=qcow2 >q.out 2>q.err
assert_eq "QEMU refuses to start: exit code" 1 "$?"
assert_eq "QEMU refuses to start: message" \
    "qemu-system-x86_64: -drive file=x.qcow2,if=none,id=d0,format=qcow2: $(in_use w x.qcow2)" \
    "$(cat q.err)"
# qimg against qimg
qimg_refused "qimg io against qimg io" \
    "qimg: can't open device x.qcow2: $(in_use w x.qcow2)" io -c 'write 0 4k' x.qcow2
qimg_refused "qimg info against qimg io" \
    "qimg: Could not open 'x.qcow2': $(in_use r x.qcow2)" info x.qcow2
assert_rc "qimg info -U against qimg io" 0 "$QIMG" info -U x.qcow2
assert_eq "the holder's bytes did not change" "$mine" "$(held x.qcow2)"
echo 'write -P 0x55 0 4k' >&3
release
assert_eq "qimg io exited cleanly" 0 "$HOLD_RC"
wait_free x.qcow2
assert_rc "written once qimg io closed it" 0 "$QEMU_IO" -r -c 'read -P 0x55 0 4k' x.qcow2

# readers share with readers
hold m x.qcow2 "$QIMG" io -r x.qcow2
assert_eq "qimg io -r: the bytes of a read-only QEMU" "100 201 203" "$(held x.qcow2)"
assert_rc "qemu-io -r reads meanwhile" 0 "$QEMU_IO" -r -c 'read -P 0x55 0 4k' x.qcow2
assert_rc "qemu-img info meanwhile" 0 "$QEMU_IMG" info x.qcow2
assert_rc "qimg io -r meanwhile" 0 "$QIMG" io -r -c 'read -P 0x55 0 4k' x.qcow2
assert_rc "qemu-io write refused" 1 "$QEMU_IO" -c 'write 0 4k' x.qcow2
release

# ---- 3. the same bytes as QEMU for the same kind of open ----

qi create -q -f qcow2 base.qcow2 64M
qi create -q -f qcow2 -b base.qcow2 -F qcow2 top.qcow2
qi create -q -f qcow2 -o data_file=d.data d.qcow2 64M
qi create -q -f qcow2 -b src.raw -F raw rawtop.qcow2
same_bytes() { # same_bytes FILES IO-ARGS...
    local files=$1
    shift
    assert_eq "bytes of io $*" "$(held_by "$files" "$QEMU_IO" "$@")" \
        "$(held_by "$files" "$QIMG" io "$@")"
}
same_bytes x.qcow2 x.qcow2
same_bytes x.qcow2 -r x.qcow2
same_bytes x.qcow2 -r -U x.qcow2
same_bytes src.raw -f raw src.raw
same_bytes src.raw -f raw -r src.raw
same_bytes "top.qcow2 base.qcow2" top.qcow2
same_bytes "top.qcow2 base.qcow2" -r -U top.qcow2
same_bytes "rawtop.qcow2 src.raw" rawtop.qcow2
same_bytes "d.qcow2 d.data" d.qcow2
same_bytes "d.qcow2 d.data" -r d.qcow2
same_bytes "d.qcow2 d.data" -r -U d.qcow2
# a resize takes the resize permission (qemu-io's truncate)
hold q src.raw "$QEMU_IO" -f raw src.raw
echo 'truncate 64M' >&3
wait_held src.raw 103
q_bytes=$(held src.raw)
release
hold m src.raw "$QIMG" io -f raw src.raw
echo 'truncate 64M' >&3
wait_held src.raw 103
assert_eq "raw truncate takes resize" "$q_bytes" "$(held src.raw)"
release

# short-lived commands, seen through strace: the lock states each file
# holds, in order, must be qemu-img's (create: the creation's locks first).
# One python3 runs them all, in order (some change the files: qemu-img's
# run first, then qimg's, as one after the other), each command of
# phases.list: "same" (every state) or "first" (the first state of each
# file only: qemu-img's create reopens the new image a few more times than
# qimg's), then the arguments, tab-separated; phases-N.q and phases-N.m
# hold what each tool locked.
{
    cat >phases.py <<'EOF'
import collections, re, subprocess, sys
def phases_of(cmd):
    subprocess.run(["strace", "-f", "-qq", "-e", "trace=openat,fcntl,close", "-o",
                    "st.raw"] + cmd, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    # Each command is one process: its threads share one table of fds,
    # so an fd is keyed by its number alone (strace -f starts each line
    # with the thread's id, and a file opened in one thread may be locked
    # in another).  A call that another thread's call interrupted is split
    # over an "<unfinished ...>" line and a "<... NAME resumed>" line of
    # the same thread, which are joined first: read whole, neither half
    # matched, and the file's locks showed under "?" (seen once under
    # load: 025's "locks of convert -U", stop 54).
    name, state, rising = {}, collections.defaultdict(set), collections.defaultdict(bool)
    phases = collections.defaultdict(list)
    def emit(k):
        if rising[k] and state[k]:
            phases[name.get(k, "?")].append(" ".join(map(str, sorted(state[k]))))
        rising[k] = False
    pending = {}
    def joined():
        for line in open("st.raw"):
            line = line.rstrip("\n")
            tid = line.split()[0]
            if line.endswith(" <unfinished ...>"):
                pending[tid] = line[:-len(" <unfinished ...>")]
                continue
            m = re.match(r"(\d+) +<\.\.\. \w+ resumed>(.*)$", line)
            if m and m.group(1) in pending:
                line = pending.pop(m.group(1)) + m.group(2)
            yield line
    for line in joined():
        m = re.search(r'openat\(AT_FDCWD, "([^"]+)".*\) = (\d+)$', line)
        if m:
            name[m.group(2)] = m.group(1)
            continue
        m = re.search(r"fcntl\((\d+), F_OFD_SETLK, \{l_type=(F_\w+), l_whence=SEEK_SET, "
                      r"l_start=(\d+), l_len=1\}\) = 0", line)
        if m:
            k, b = m.group(1), int(m.group(3))
            if m.group(2) == "F_RDLCK":
                rising[k] = rising[k] or b not in state[k]
                state[k].add(b)
            else:
                emit(k)
                state[k].discard(b)
            continue
        m = re.search(r"close\((\d+)\)", line)
        if m:
            k = m.group(1)
            emit(k)
            state.pop(k, None)
            name.pop(k, None)
    for k in list(state):
        emit(k)
    return [f + ": " + " | ".join(phases[f]) for f in sorted(phases)]
qemu_img, qimg = sys.argv[1], sys.argv[2]
for n, line in enumerate(open("phases.list"), 1):
    how, *args = line.rstrip("\n").split("\t")
    for tool, ext in ((qemu_img, "q"), (qimg, "m")):
        out = phases_of([tool] + args)
        if how == "first":
            out = [o.split(" | ")[0] for o in out]
        with open("phases-%d.%s" % (n, ext), "w") as f:
            f.write("\n".join(out))
EOF
    # phases_same / phases_first ARGS...: a line of phases.list
    : >phases.list
    phases_same() { (IFS=$'\t' && printf 'same\t%s\n' "$*") >>phases.list; }
    phases_first() { (IFS=$'\t' && printf 'first\t%s\n' "$*") >>phases.list; }
    phases_same info x.qcow2
    phases_same info -U x.qcow2
    phases_same info -f raw src.raw
    phases_same info --backing-chain top.qcow2
    phases_same check x.qcow2
    phases_same check -U d.qcow2
    phases_same check -r all d.qcow2
    phases_same map top.qcow2
    phases_same map rawtop.qcow2
    phases_same compare x.qcow2 top.qcow2
    phases_same snapshot -l x.qcow2
    phases_same snapshot -c s9 x.qcow2
    phases_same resize x.qcow2 +1M
    phases_same resize -f raw src.raw +1M
    phases_same bench -w -c 1 d.qcow2
    phases_same convert -O raw rawtop.qcow2 out.raw
    phases_same convert -O raw d.qcow2 out.raw
    phases_same convert -U -O raw top.qcow2 out.raw
    phases_same convert -n -f raw -O raw src.raw out.raw
    phases_same create -f raw new.raw 1M
    phases_first create -f qcow2 new.qcow2 1M
    phases_first create -f qcow2 -b base.qcow2 -F qcow2 new.qcow2
    phases_first create -f qcow2 -o data_file=new.data new.qcow2 1M
    phases_first convert -O qcow2 x.qcow2 new.qcow2
    python3 phases.py "$QEMU_IMG" "$QIMG" || _fail "phases.py failed"
    n=0
    while IFS=$'\t' read -r how args; do
        n=$((n + 1))
        assert_eq "$([ "$how" = first ] && echo "first ")locks of ${args//$'\t'/ }" \
            "$(<"phases-$n.q")" "$(<"phases-$n.m")"
    done <phases.list
}
finish
