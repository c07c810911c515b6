#!/bin/bash
# qimg io's breakpoints (tools/io-break.c facts 1-4; block/faulty.c
# invariant 5) and the fault node's states (faulty.c invariant 4;
# faulty-config.c fact 3) against qemu-io 7.2 on copies of the same images
# through "blkdebug::img" / "blkdebug:CONFIG:img": the same output, exit
# code and contents.  Sequences whose completions qemu-io prints in an
# order of its scheduling are compared as sorted lines.  Then what qimg
# does instead of qemu-io's waits for ever (a synchronous request at a
# breakpoint, aio_flush or exit with a stopped request, wait_break with
# nothing to wait for), the events qimg cannot stop at, the states in the
# rule syntax, and qemu-img check after every workload.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

filter() {
    sed -e 's/[0-9]* ops; [0-9/:. sec]* ([0-9/.inf]* [EPTGMKiBbytes]*\/sec and [0-9/.inf]* ops\/sec)/X ops; TIME/' \
        -e 's/qemu-io: /qimg: /'
}

# both DESC HOW IMG NAME ARGS...: qemu-io ARGS NAME in q/ on a copy of IMG,
# qimg io in m/ on another; HOW "sort" compares sorted stdout, "stdout"
# leaves stderr out, "-" compares both as they are.
mkdir -p q m
both() {
    local desc=$1 order=$2 img=$3 name=$4 qrc mrc
    shift 4
    cp "$img" q/img && cp "$img" m/img || exit 1
    (cd q && timeout 20 "$QEMU_IO" "$@" "$name" >../q.out 2>../q.err)
    qrc=$?
    (cd m && timeout 20 "$QIMG" io "$@" "$name" >../m.out 2>../m.err)
    mrc=$?
    assert_eq "$desc: exit code" "$qrc" "$mrc"
    if [ "$order" = sort ]; then
        assert_eq "$desc: stdout" "$(filter <q.out | sort)" "$(filter <m.out | sort)"
    else
        assert_eq "$desc: stdout" "$(filter <q.out)" "$(filter <m.out)"
    fi
    if [ "$order" != stdout ]; then
        assert_eq "$desc: stderr" "$(filter <q.err)" "$(filter <m.err)"
    fi
    assert_rc "$desc: contents" 0 "$QEMU_IMG" compare -q q/img m/img
    assert_rc "$desc: check" 0 "$QEMU_IMG" check -q m/img
}

qi create -q -f qcow2 e.qcow2 64M
qi create -q -f qcow2 a.qcow2 64M
qio a.qcow2 'write -P 1 0 64k' 'write -P 2 8M 64k'

# ---- break, wait_break, resume (facts 1, 2, 4) ----
both "write_aio" - e.qcow2 blkdebug::img -c 'break write_aio A' -c 'aio_write -P 7 0 64k' \
    -c 'wait_break A' -c 'resume A' -c 'aio_flush' -c 'read -P 7 0 64k'
both "write_aio over data" - a.qcow2 blkdebug::img -c 'break write_aio A' \
    -c 'aio_write -P 7 4k 4k' -c 'wait_break A' -c 'resume A' -c 'aio_flush' \
    -c 'read -P 1 0 4k' -c 'read -P 7 4k 4k'
# cache=none: an in-place rewrite could go to io_uring from the submitting
# thread; over a fault node it goes to the pool (qcow2/read.c direct_begin)
both "write_aio in place, -n" - a.qcow2 blkdebug::img -n -c 'break write_aio A' \
    -c 'aio_write -P 7 4k 4k' -c 'wait_break A' -c 'resume A' -c 'aio_flush' \
    -c 'read -P 7 4k 4k'
both "l2_update" - a.qcow2 blkdebug::img -c 'break l2_update A' -c 'aio_write -P 5 16M 4k' \
    -c 'wait_break A' -c 'resume A' -c 'aio_flush' -c 'read -P 5 16M 4k'
both "read_aio" - a.qcow2 blkdebug::img -c 'break read_aio R' -c 'aio_read -P 2 8M 4k' \
    -c 'wait_break R' -c 'resume R' -c 'aio_flush'
# one breakpoint stops one request: the second write passes while A waits
both "one request" sort e.qcow2 blkdebug::img -c 'break write_aio A' \
    -c 'aio_write -P 1 0 4k' -c 'wait_break A' -c 'aio_write -P 2 1M 4k' -c 'resume A' \
    -c 'aio_flush' -c 'read -P 1 0 4k' -c 'read -P 2 1M 4k'
both "two tags" sort e.qcow2 blkdebug::img -c 'break write_aio A' -c 'aio_write -P 1 0 4k' \
    -c 'wait_break A' -c 'break write_aio B' -c 'aio_write -P 2 2M 4k' -c 'wait_break B' \
    -c 'resume B' -c 'resume A' -c 'aio_flush' -c 'read -P 1 0 4k' -c 'read -P 2 2M 4k'
both "again after resume" - e.qcow2 blkdebug::img -c 'break write_aio A' \
    -c 'aio_write -P 1 0 4k' -c 'wait_break A' -c 'break write_aio A' -c 'resume A' \
    -c 'aio_flush' -c 'aio_write -P 2 0 4k' -c 'wait_break A' -c 'resume A' -c 'aio_flush' \
    -c 'read -P 2 0 4k'

# ---- remove_break (fact 3) and the errors (facts 1, 2) ----
both "remove_break resumes" - e.qcow2 blkdebug::img -c 'break write_aio A' \
    -c 'aio_write -P 4 0 4k' -c 'wait_break A' -c 'remove_break A' -c 'aio_flush' \
    -c 'read -P 4 0 4k'
both "remove_break before" - e.qcow2 blkdebug::img -c 'break write_aio A' \
    -c 'remove_break A' -c 'aio_write -P 4 0 4k' -c 'aio_flush'
both "errors" - e.qcow2 blkdebug::img -c 'remove_break A' -c 'resume A' \
    -c 'break nosuch B' -c 'break write_aio' -c 'resume'
both "no blkdebug node" - e.qcow2 img -c 'break write_aio A' -c 'remove_break A' \
    -c 'resume A'
for c in break remove_break resume wait_break; do
    both "help $c" - e.qcow2 img -c "help $c"
done

# ---- states: [set-state] and state= (faulty.c invariant 4) ----
printf '[set-state]\nstate = "1"\nevent = "write_aio"\nnew_state = "2"\n\n[inject-error]\nstate = "2"\nevent = "write_aio"\nonce = "on"\n' >m/st1.cfg
printf '[set-state]\nstate = "1"\nevent = "write_aio"\nnew_state = "2"\n\n[set-state]\nstate = "2"\nevent = "write_aio"\nnew_state = "3"\n\n[inject-error]\nstate = "3"\nevent = "write_aio"\n' >m/st2.cfg
printf '[set-state]\nevent = "write_aio"\nnew_state = "x"\n' >m/bad1.cfg
printf '[inject-error]\nevent = "write_aio"\nstate = "1x"\n' >m/bad2.cfg
cp m/*.cfg q/
W=(-c 'write -P 1 0 4k' -c 'write -P 2 0 4k' -c 'write -P 3 0 4k' -c 'write -P 4 0 4k')
both "set-state, then one error" - e.qcow2 blkdebug:st1.cfg:img "${W[@]}"
# (qemu-io's armed rule also fails its flushes at close: stderr differs)
both "two switches" stdout e.qcow2 blkdebug:st2.cfg:img -c 'write -P 1 0 4k' \
    -c 'write -P 2 64k 4k' -c 'write -P 3 128k 4k' -c 'write -P 4 192k 4k'
for cfg in bad1 bad2; do
    both "$cfg.cfg" - e.qcow2 "blkdebug:$cfg.cfg:img" -c 'read 0 1'
done

# ---- qimg instead of waiting for ever (io-break.c) ----
mio() { # DESC RC PATTERN ARGS...: qimg io ARGS on m/img, exit code and a line
    local desc=$1 rc=$2 pat=$3
    shift 3
    (cd m && timeout 20 "$QIMG" io "$@" >../m.out 2>&1)
    assert_eq "$desc: exit code" "$rc" "$?"
    assert_rc "$desc: says '$pat'" 0 grep -q -e "$pat" m.out
}
cp e.qcow2 m/img
mio "sync write at a breakpoint" 1 "write failed: Resource deadlock avoided" \
    -c 'break write_aio A' -c 'write -P 1 0 4k' -c 'write -P 2 0 4k' blkdebug::img
"$QIMG" io -c 'read -P 2 0 4k' m/img >m.out
assert_rc "the next write passed" 0 grep -q "^read 4096" m.out
mio "aio_flush with a stopped request" 1 \
    "aio_flush: request 'A' is stopped at a breakpoint (resume it first)" \
    -c 'break write_aio A' -c 'aio_write -P 5 0 4k' -c 'aio_flush' blkdebug::img
mio "exit with a stopped request" 0 "blkdebug: Suspended request 'A'" \
    -c 'break write_aio A' -c 'aio_write -P 6 0 4k' -c 'wait_break A' blkdebug::img
"$QIMG" io -c 'read -P 6 0 4k' m/img >m.out
assert_rc "the stopped write landed at close" 0 grep -q "^read 4096" m.out
mio "wait_break with nothing in flight" 1 \
    "wait_break: no request in flight can reach breakpoint 'Z'" -c 'wait_break Z' \
    blkdebug::img
mio "an event qimg cannot stop at" 1 "cannot match QEMU's event 'l2_alloc_cow_read'" \
    -c 'break l2_alloc_cow_read A' blkdebug::img
assert_rc "first line as qemu-io's" 0 grep -q "^Could not set breakpoint: Operation not supported" m.out
assert_rc "check after all" 0 "$QEMU_IMG" check -q m/img
# the rule syntax: state=, new_state=
cp e.qcow2 m/img
mio "new_state=/state= rules" 1 "write failed: Input/output error" \
    -c 'write -P 1 0 4k' -c 'write -P 2 64k 4k' -c 'write -P 3 128k 4k' \
    "blkdebug:event=data_write,state=1,new_state=2;event=data_write,state=2,once:img"
assert_eq "only the second write failed" "wrote failed wrote" \
    "$(grep -o '^wrote\|failed' m.out | tr '\n' ' ' | sed 's/ $//')"
finish
