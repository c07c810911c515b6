#!/bin/bash
# 179-ssh: images over SSH's SFTP (block/ssh.c) against qemu-img/qemu-io
# 7.2 on a private sshd (iotests/sshd.sh, stopped by PID at the end):
# info of raw and qcow2 over ssh:// names, json: names (driver=ssh, the
# older host/port/host_key_check, file.driver=ssh), read/write/flush of raw
# and qcow2, create and convert to and from ssh, resize (grow only), and
# bad input -- a missing file, a folder, no server, a server gone in the
# middle (an error, never a hang).
. "${0%/*}/../common.sh"
. "$IOTESTS_DIR/sshd.sh"
ssh_requires
requires strace
ssh_start
ssh_env
ssh_known_host
U=$SSH_URI

"$QEMU_IMG" create -q -f raw base.raw 1M || exit 1
"$QEMU_IO" -c 'write -P 7 0 200k' -c 'write -P 9 700k 64k' base.raw >/dev/null || exit 1
"$QEMU_IMG" convert -O qcow2 base.raw base.qcow2 || exit 1
cp base.raw a.raw && cp base.qcow2 a.qcow2 || exit 1

# info: the name QEMU gives the node (user@host:port, ?host_key_check=)
same_as_qemu_err info "$U/a.raw"
same_as_qemu_err info "$U/a.qcow2"
same_as_qemu_err info --output=json "$U/a.qcow2"
same_as_qemu_err info --output=json "$U/a.raw?host_key_check=no"
same_as_qemu_err info -f raw "ssh://$(id -un)@127.0.0.1:$SSH_PORT$SCRATCH/a.raw"
same_as_qemu_err info "json:{'driver': 'ssh', 'server': {'host': '127.0.0.1', 'port': '$SSH_PORT'}, 'path': '$SCRATCH/a.raw'}"
same_as_qemu_err info "json:{'driver': 'qcow2', 'file': {'driver': 'ssh', 'host': '127.0.0.1', 'port': $SSH_PORT, 'path': '$SCRATCH/a.qcow2', 'host_key_check': 'yes'}}"
same_as_qemu_err info --image-opts "driver=raw,file.driver=ssh,file.server.host=127.0.0.1,file.server.port=$SSH_PORT,file.path=$SCRATCH/a.raw,file.host-key-check.mode=none"
same_as_qemu_err map --output=json "$U/a.qcow2"

# reads, writes and flushes of raw and qcow2 over ssh (several SFTP reads in
# flight: the 300k read is 10 of them; the same file for both tools, so
# the reads are of what neither tool writes)
raw_io=(-f raw -c 'read -P 7 0 100k' -c 'read -P 0 400k 300k' -c 'write -P 3 100k 300k'
    -c flush -c 'read -P 3 100k 300k' -c 'write -P 4 1020k 4k' -c 'read -v 1048570 6')
cp base.raw w.raw && cp base.raw e.raw || exit 1
"$QEMU_IO" "${raw_io[@]}" e.raw >/dev/null || exit 1
same_as_qemu_io "raw" "${raw_io[@]}" "$U/w.raw"
assert_rc "raw: contents" 0 cmp e.raw w.raw
IO_IMAGE=$SCRATCH/w.qcow2 IO_FROM=base.qcow2 same_as_qemu_io "qcow2" \
    -c 'read -P 9 700k 64k' -c 'write -P 5 64k 1k' -c 'write -z 512k 128k' -c flush \
    -c 'read -P 5 64k 1k' -c 'read -P 0 512k 128k' -c 'write -P 6 2M 4k' "$U/w.qcow2"
same_as_qemu_io "info of raw over ssh" -f raw -c info "$U/a.raw"
same_as_qemu_io "info of the node itself" -c info \
    "json:{'driver': 'ssh', 'server.host': '127.0.0.1', 'server.port': '$SSH_PORT', 'path': '$SCRATCH/a.raw'}"
same_as_qemu_io "read past the end" -f raw -c 'read 1048572 8' "$U/a.raw"

# convert from ssh, and to ssh (into an image created over ssh)
"$QEMU_IMG" convert -O qcow2 "$U/a.qcow2" q.qcow2 || exit 1
assert_rc "convert from ssh" 0 "$QIMG" convert -O qcow2 "$U/a.qcow2" m.qcow2
assert_rc "convert from ssh: contents" 0 "$QEMU_IMG" compare -q q.qcow2 m.qcow2
assert_eq "convert from ssh: map" "$(map_flags q.qcow2)" "$(map_flags m.qcow2)"
"$QEMU_IMG" convert -O qcow2 base.raw "$U/qo.qcow2" || exit 1
assert_rc "convert to ssh" 0 "$QIMG" convert -O qcow2 base.raw "$U/mo.qcow2"
assert_rc "convert to ssh: contents" 0 "$QEMU_IMG" compare -q qo.qcow2 mo.qcow2
assert_rc "convert to ssh: check" 0 "$QEMU_IMG" check -q mo.qcow2
# (not the map: where a cluster is only partly data, qemu-img writes its
# zeros, qimg leaves them to the file's end being extended -- a hole there)
assert_eq "convert to ssh: clusters" "$("$QEMU_IMG" check qo.qcow2 | tail -n 2)" \
    "$("$QEMU_IMG" check mo.qcow2 | tail -n 2)"
assert_rc "convert -O raw to ssh" 0 "$QIMG" convert -O raw "$U/a.qcow2" "$U/mo.raw"
assert_rc "convert -O raw to ssh: contents" 0 cmp base.raw mo.raw

# create over ssh: the size rounded up to 512 bytes; no preallocation
for f in raw qcow2; do
    same_as_qemu_err create -f $f "$U/c.$f" 1000
    cp "c.$f" "q.$f"
    same_as_qemu_err create -f $f "$U/c.$f" 1000
    assert_rc "create -f $f: same file" 0 cmp "q.$f" "c.$f"
done
same_as_qemu_err create -f raw -o preallocation=full "$U/c.raw" 1M
same_as_qemu_err create -f qcow2 -o preallocation=full "$U/c.qcow2" 1M
same_as_qemu_err create -f qcow2 -o nocow=on "$U/c.qcow2" 1M
same_as_qemu_err create -f raw "$U/nodir/c.raw" 1M
same_as_qemu_io "read-only" -r -f raw -c 'write 0 512' "$U/a.raw"
# resize grows only (one byte written at the new end)
cp base.raw r.raw && cp base.raw q.raw || exit 1
"$QEMU_IMG" resize -q -f raw "$U/q.raw" +100k || exit 1
assert_rc "resize over ssh" 0 "$QIMG" resize -q -f raw "$U/r.raw" +100k
assert_rc "resize over ssh: same file" 0 cmp q.raw r.raw
same_as_qemu_err resize -f raw "$U/r.raw" --shrink 64k

# bad input: a missing file, a folder, bad names
same_as_qemu_err info "$U/missing.raw"
same_as_qemu_err info -f raw "ssh://127.0.0.1:$SSH_PORT/"
same_as_qemu_err info "ssh://127.0.0.1:$SSH_PORT"
same_as_qemu_err info "ssh:///x"
same_as_qemu_err info "$U/a.raw?host_key_check=maybe"

# a FUA write (write -f) is made durable as a flush is, once: the fsync()
# calls the server makes for it (strace on sshd and its session processes)
# are qemu-io's -- one, none more at close (fact 6, invariant 5).  (A
# server without fsync@openssh.com, where FUA warns as a flush does, is
# not tried: OpenSSH's sftp server always has it.)
#
# server_fsyncs DESC TOOL ARGS...: FSYNCS = the fsync() calls the server
# makes while TOOL ARGS runs (its stdout in fs.tool), with nothing left to
# timing.  strace's stderr is a FIFO read here: its line "Process SSHD
# attached" comes after the PTRACE_SEIZE that has it follow every fork of
# sshd's from then on, and after its SIGINT handler is set (a SIGINT
# before that is lost: a background job ignores it), so the tool starts
# only then; fs.out is counted only once strace has ended.  (A stale
# st.err once ended the wait for that line before strace had attached:
# a count of 0.)  A failed run, or strace that does not attach or end
# well, is its own FAILED line.
server_fsyncs() {
    local desc=$1 st fd line other="" rc
    shift
    FSYNCS=
    rm -f st.fifo && mkfifo st.fifo || exit 1
    strace -f -e trace=fsync -o fs.out -p "$_sshd_pid" >/dev/null 2>st.fifo &
    st=$!
    exec {fd}<st.fifo
    while read -r -t 60 line <&"$fd"; do
        [ "$line" = "strace: Process $_sshd_pid attached" ] && break
        other+="$line; "
        line=
    done
    if [ -z "$line" ]; then
        _fail "$desc: strace did not attach to sshd: $other"
        kill "$st" 2>/dev/null
        wait "$st"
        exec {fd}<&-
        return 1
    fi
    timeout 60 "$@" >fs.tool 2>fs.err
    rc=$?
    kill -INT "$st"
    wait "$st"
    st=$?
    exec {fd}<&-
    if [ "$rc" != 0 ] || [ -s fs.err ]; then
        _fail "$desc: exit code $rc (0 wanted), stderr:"
        cat fs.err
        return 1
    fi
    # (strace ends on SIGINT by raising it once its output is written)
    [ "$st" = 130 ] || { _fail "$desc: strace's exit code $st (130 wanted)"; return 1; }
    FSYNCS=$(grep -c "fsync(" fs.out)
}
# same_fsyncs DESC ARGS...: qemu-io ARGS and qimg io ARGS succeed with the
# same output, and the server makes as many fsync() calls for each.
same_fsyncs() {
    local desc=$1 q
    shift
    server_fsyncs "$desc (qemu-io)" "$QEMU_IO" "$@" || return 1
    q=$FSYNCS && mv fs.tool q.tool || exit 1
    server_fsyncs "$desc" "$QIMG" io "$@" || return 1
    assert_same_filtered "$desc: stdout" io_filter q.tool fs.tool
    assert_eq "$desc: the server's fsyncs" "$q" "$FSYNCS"
}
cp base.raw f.raw || exit 1
same_fsyncs "write -f" -f raw -c 'write -f -P 1 0 4k' "$U/f.raw"
same_fsyncs "write -f, flush" -f raw -c 'write -f -P 1 0 4k' -c flush "$U/f.raw"
same_fsyncs "write, write -f" -f raw -c 'write -P 1 0 4k' -c 'write -f 8k 4k' "$U/f.raw"

# a server gone in the middle of a session: the next request fails, no
# hang.  qimg io reads its commands from a FIFO (prompts, as qemu-io's)
# and writes to one read here, so the second read is sent only once the
# first is done and the session's processes (sshd's children and theirs)
# are dead: nothing is left to timing.  (Before, the second read came 4 s
# after the first on its own; on a slow machine the session could still
# be alive then, or killed before the first read.)
# descendants PID: the PIDs of PID's children, theirs, and so on.
descendants() {
    local k
    for k in $(pgrep -P "$1"); do
        echo "$k"
        descendants "$k"
    done
}
# dead PID: the process has ended (a zombie holds no socket open any more).
dead() {
    local st
    read -r st 2>/dev/null <"/proc/$1/stat" || return 0
    st=${st##*) }
    [ "${st%% *}" = Z ]
}
cp base.raw g.raw || exit 1
rm -f g.in g.fifo && mkfifo g.in g.fifo || exit 1
timeout 60 "$QIMG" io -f raw "$U/g.raw" <g.in >g.fifo 2>&1 &
io_pid=$!
exec {g_in}<>g.in {g_out}<g.fifo
echo 'read -P 7 0 4k' >&"$g_in"
g_log=
while read -r -t 60 line <&"$g_out"; do
    g_log+="$line"$'\n'
    [[ "$line" == *"read 4096/4096 bytes at offset 0" ]] && break
done
kids=$(descendants "$_sshd_pid")
assert_eq "server gone: the first read" "qimg-io> read 4096/4096 bytes at offset 0" \
    "$line"
# shellcheck disable=SC2086
[ -n "$kids" ] && kill $kids
for _ in $(seq 1200); do
    left=
    for k in $kids; do dead "$k" || left+=" $k"; done
    [ -z "$left" ] && break
    sleep 0.05
done
assert_eq "server gone: the session's processes ended" "" "$left"
echo 'read -P 7 0 4k' >&"$g_in"
exec {g_in}>&-
g_log+=$(cat <&"$g_out")
exec {g_out}<&-
wait "$io_pid"
assert_eq "server gone: exit code (qemu-io's)" 1 $?
g_log=${g_log//qimg-io> /}
assert_eq "server gone: the second read fails, nothing else" \
    "read failed: Input/output error" "$(grep -v '^read 4096\|^4 KiB' <<<"$g_log")"

# no server at all: a port of 127.0.0.1 that this test holds bound and
# does not listen on, so that a connection to it is refused for sure (not
# sshd's port after sshd ended: a test running beside this one could take
# it meanwhile).  The socket has no SO_REUSEADDR: no other can bind the
# port, nor the kernel give it to a connection as its local port.
coproc HOLD {
    python3 -c 'import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1], flush=True)
sys.stdin.read()'
}
hold_pid=$HOLD_PID
if read -r -t 60 -u "${HOLD[0]}" port && [[ "$port" =~ ^[0-9]+$ ]]; then
    same_as_qemu_err info "ssh://127.0.0.1:$port$SCRATCH/a.raw"
else
    _fail "no port held for the no-server case"
fi
hold_in=${HOLD[1]}
exec {hold_in}>&-
wait "$hold_pid"

finish
