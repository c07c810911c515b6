#!/bin/bash
# The iotests' NBD server helpers (common.sh nbd_ready, stop_server), which
# iotest 062 starts and stops its servers by:
#  - qemu-nbd 7.2 makes its socket, then opens its image and only then
#    serves, and a SIGTERM it gets in between is lost: it runs on.  062
#    waited for the socket alone (wait_sock) and hung once on its wait after
#    such a kill.  A qemu-nbd SIGTERMed as soon as nbd_ready returned ends,
#    every time (20 rounds; with wait_sock, one in five to one in three ran
#    on here);
#  - stop_server fails fast, with a FAILED line, on a server that does not
#    end on SIGTERM, and kills it;
#  - nbd_ready fails, with a FAILED line, on a server that ended and on a
#    socket nobody serves, within its limit;
#  - for a server of one client (no -t), nbd_listening (its pid file)
#    leaves that client to the test, and server_left sees it end; a server
#    whose client never came fails server_left, with a FAILED line, within
#    its limit, and is stopped; nbd_listening fails on a server that ended.
. "${0%/*}/../common.sh"
requires qemu-img qemu-nbd nbdinfo timeout

"$QEMU_IMG" create -q -f qcow2 n.qcow2 1M
pids=()
trap 'kill -9 "${pids[@]}" 2>/dev/null; _cleanup' EXIT

ran_on=0
for i in $(seq 20); do
    rm -f n.sock
    qemu-nbd -t -k "$PWD/n.sock" -f qcow2 n.qcow2 2>/dev/null &
    pid=$!
    pids+=($pid)
    nbd_ready n.sock $pid || finish
    kill $pid
    for _ in $(seq 400); do
        running $pid || break
        sleep 0.05
    done
    if running $pid; then
        ran_on=$((ran_on + 1))
        kill -9 $pid
    fi
    wait $pid 2>/dev/null
done
assert_eq "qemu-nbds that ran on 20 s after a SIGTERM once nbd_ready returned" 0 "$ran_on"

# a "server" that ignores SIGTERM
bash -c 'trap "" TERM; echo deaf; while :; do sleep 0.1; done' >deaf.out &
deaf=$!
pids+=($deaf)
for _ in $(seq 600); do [ -s deaf.out ] && break; sleep 0.05; done
out=$(stop_server $deaf deaf 1)
assert_eq "stop_server on a process deaf to SIGTERM: its verdict" \
    "FAILED: deaf (pid $deaf) still ran 1 s after SIGTERM: killed it" "$out"
assert_rc "stop_server killed it" 1 running $deaf

qemu-nbd -t -k "$PWD/s.sock" -f qcow2 n.qcow2 2>/dev/null &
pid=$!
pids+=($pid)
nbd_ready s.sock $pid || finish
stop_server $pid qemu-nbd
assert_rc "stop_server: a qemu-nbd that served ended" 1 running $pid

# nbd_ready on servers that will not serve: failures, not waits
bash -c 'exit 3' &
gone_pid=$!
wait $gone_pid
start=$SECONDS
out=$(nbd_ready none.sock $gone_pid 30)
assert_eq "nbd_ready, its server ended: its verdict" \
    "FAILED: the NBD server at nbd+unix:///?socket=$PWD/none.sock (pid $gone_pid) ended before it answered" \
    "$out"
assert_rc "nbd_ready, its server ended: at once ($((SECONDS - start)) s)" 0 \
    test $((SECONDS - start)) -lt 15
start=$SECONDS
out=$(nbd_ready none.sock "" 2)
assert_eq "nbd_ready, no server: its verdict" \
    "FAILED: no NBD server answered at nbd+unix:///?socket=$PWD/none.sock within 2 s" "$out"
assert_rc "nbd_ready, no server: within its limit ($((SECONDS - start)) s)" 0 \
    test $((SECONDS - start)) -lt 15

# one client: served once nbd_listening returned, gone when it left
rm -f o.sock o.pid
qemu-nbd -k "$PWD/o.sock" --pid-file "$PWD/o.pid" -f qcow2 n.qcow2 2>/dev/null &
pid=$!
pids+=($pid)
nbd_listening o.sock o.pid $pid || finish
assert_eq "one client: its size" 1048576 \
    "$(timeout 60 nbdinfo --size "nbd+unix:///?socket=$PWD/o.sock")"
server_left $pid qemu-nbd
assert_rc "server_left: the server ended" 1 running $pid
# its client never comes: a failure within the limit, and the server stopped
rm -f o.sock o.pid
qemu-nbd -k "$PWD/o.sock" --pid-file "$PWD/o.pid" -f qcow2 n.qcow2 2>/dev/null &
pid=$!
pids+=($pid)
nbd_listening o.sock o.pid $pid || finish
start=$SECONDS
out=$(server_left $pid qemu-nbd 1)
assert_eq "server_left, no client: its verdict" \
    "FAILED: qemu-nbd (pid $pid) still ran 1 s after its client should have left: stopping it" \
    "$out"
assert_rc "server_left, no client: stopped ($((SECONDS - start)) s)" 1 running $pid
# a server that ended before it listened
out=$(nbd_listening none.sock none.pid $gone_pid 30)
assert_eq "nbd_listening, its server ended: its verdict" \
    "FAILED: the NBD server for none.sock (pid $gone_pid) ended before it listened" "$out"
finish
