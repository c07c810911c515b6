#!/usr/bin/env bash
# scripts/ceph-micro.sh start|stop|kill|status DIR [OSDS]: a one-machine Ceph
# cluster for qimg's RBD tests and benchmarks.
#
#   start DIR [OSDS]  one monitor and OSDS (1-3, default 1) in-memory OSDs
#                     ("memstore", 1 GiB each) on 127.0.0.1 with no
#                     authentication, the pool "rbd" initialised for RBD;
#                     everything (ceph.conf, data, logs, PIDs) lives in DIR,
#                     which must not hold a running cluster.  Prints
#                     CEPH_CONF=DIR/ceph.conf: every client (qimg, qemu-img,
#                     rbd, rados) finds the cluster through it (CEPH_CONF, or
#                     ":conf=PATH" in an rbd: name).
#   stop DIR          SIGTERM to this cluster's own daemons, by the PIDs
#                     start wrote (OSDs first, then the monitor: the other
#                     order keeps the OSDs waiting for it), waiting for each
#                     to exit, SIGKILL after 20 s.  Never by name: other
#                     clusters (other tests, other developers) may be running.
#   kill DIR          SIGKILL to the same daemons, by the same PIDs, waiting
#                     for each to exit: for a cluster whose data is thrown
#                     away (the tests'): under 1 s, stop took 1-2 s here.
#   status DIR        "up" and exit 0 when the monitor answers, else exit 1.
#
# CEPH_MICRO_OSD_MIB sets each OSD's memstore size (default 1024 MiB; the
# data lives in the OSD's memory).  CEPH_MICRO_TIMEOUT bounds start in
# seconds (default 90): every wait and every ceph command it runs shares
# that deadline, so a cluster that does not come up is a clear failure
# (exit 1, the daemon's log tail), never a hang.
#
# A PID file counts only while its process is this cluster's daemon (its
# command line names DIR/ceph.conf): after a restart a stale PID may belong
# to another process, which stop leaves alone.
#
# The monitor listens on a free port (so clusters can run side by side); it
# gets an explicit monmap, since with "mon host" alone it falls back to the
# default ports.  A failed start stops what it started and exits non-zero
# with the daemon's log tail.  Start runs few ceph commands (each costs
# some 0.3 s of CPU): it waits for the monitor's port, and "rbd pool init"
# ends once an OSD is up.  Measured on the 2-core test machine under a load
# of 15-17: start 14-15 s (1 OSD), 22 s (2), stop 1.7 s, kill 0.8 s.
set -euo pipefail

usage() {
    echo "usage: $0 start DIR [OSDS] | stop DIR | kill DIR | status DIR" >&2
    exit 2
}

[ $# -ge 2 ] || usage
cmd=$1
dir=$2

deadline=$((SECONDS + ${CEPH_MICRO_TIMEOUT:-90}))
# left: the seconds left before the deadline (at least 1).
left() {
    local n=$((deadline - SECONDS))
    echo $((n > 0 ? n : 1))
}

# ceph CMD...: the ceph tool on this cluster, bounded by the deadline.
cephc() {
    local t
    t=$(left)
    timeout "$((t < 30 ? t : 30))" ceph --conf "$dir/ceph.conf" --connect-timeout 10 "$@"
}

# setup CMD...: a setup step's ceph command (stdout: its output; errors in
# setup.log), retried until it succeeds or the deadline passes: a young
# monitor may refuse a command for a moment ("problem getting command
# descriptions from mon", seen on the loaded test machine).  Every step is
# idempotent: "osd create UUID" gives the same id again, an existing pool
# or crush item is no error.
setup() {
    until cephc "$@" 2>>"$dir/log/setup.log"; do
        running "$dir/mon.pid" && [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.5
    done
}

# pid_alive PIDFILE: its process runs and is this cluster's daemon.
pid_alive() {
    local pid
    [ -f "$1" ] || return 1
    pid=$(cat "$1")
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "--conf $dir/ceph.conf "
}

# live PID: the process exists and is no zombie (a killed daemon stays one
# until PID 1 reaps it, which here took up to 1 s).
live() {
    local st
    st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$st" ] && [ "${st%% *}" != Z ]
}

# running PIDFILE: the daemon this start launched has not exited (its
# command line may be the shell's for a moment, before the exec).
running() {
    live "$(cat "$1")"
}

stop_pid() { # PIDFILE [SIGNAL]: SIGNAL (TERM), wait up to 20 s, then SIGKILL
    local f=$1 sig=${2:-TERM} pid i
    [ -f "$f" ] || return 0
    pid=$(cat "$f")
    if pid_alive "$f"; then
        kill -"$sig" "$pid" 2>/dev/null || true
        kill -CONT "$pid" 2>/dev/null || true # a test may have stopped it
        for ((i = 0; i < 200; i++)); do
            live "$pid" || break
            sleep 0.1
        done
        if live "$pid"; then
            echo "ceph-micro: $(basename "$f" .pid) (PID $pid) did not stop, killing it" >&2
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    rm -f "$f"
}

do_stop() { # [SIGNAL]
    local f
    for f in "$dir"/osd*.pid; do
        [ -e "$f" ] && stop_pid "$f" "${1:-TERM}"
    done
    stop_pid "$dir/mon.pid" "${1:-TERM}"
    return 0
}

fail_start() { # MESSAGE [LOG]
    if [ "$SECONDS" -ge "$deadline" ]; then
        echo "ceph-micro: $1: start's time limit passed (CEPH_MICRO_TIMEOUT=${CEPH_MICRO_TIMEOUT:-90} s)" >&2
    else
        echo "ceph-micro: $1" >&2
    fi
    [ -n "${2:-}" ] && [ -f "$2" ] && tail -n 20 "$2" >&2
    do_stop
    exit 1
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# daemon NAME LOG CMD...: start a daemon in the foreground mode in the
# background, its PID in DIR/NAME.pid.
daemon() {
    local name=$1 log=$2
    shift 2
    "$@" >>"$log" 2>&1 </dev/null &
    echo $! >"$dir/$name.pid"
}

# start_mon: a fresh monitor on a free port (its ceph.conf, monmap, data);
# 1 if it exited or does not answer.
start_mon() {
    local fsid port i
    rm -rf "$dir/mon" "$dir"/osd[0-9]* "$dir/run" "$dir/log" "$dir"/*.pid "$dir/monmap"
    mkdir -p "$dir/mon" "$dir/run" "$dir/log"
    fsid=$(uuidgen)
    port=$(free_port)
    cat >"$dir/ceph.conf" <<EOF
[global]
fsid = $fsid
mon host = [v1:127.0.0.1:$port]
public addr = 127.0.0.1
ms bind msgr2 = false
auth cluster required = none
auth service required = none
auth client required = none
auth allow insecure global id reclaim = true
osd pool default size = 1
osd pool default min size = 1
osd crush chooseleaf type = 0
mon allow pool delete = true
mon warn on pool no redundancy = false
run dir = $dir/run
admin socket = $dir/run/\$name.\$pid.asok
log file = $dir/log/\$name.log
keyring = /dev/null
[mon.a]
mon data = $dir/mon
mon data avail crit = 0
[osd]
osd data = $dir/osd\$id
osd objectstore = memstore
memstore device bytes = $((${CEPH_MICRO_OSD_MIB:-1024} << 20))
osd class load list = *
osd class default list = *
osd crush update on start = false
osd class update on start = false
EOF
    monmaptool --create --fsid "$fsid" --addv a "[v1:127.0.0.1:$port]" "$dir/monmap" \
        >"$dir/log/setup.log" 2>&1 || fail_start "monmaptool failed" "$dir/log/setup.log"
    ceph-mon --conf "$dir/ceph.conf" --id a --mkfs --monmap "$dir/monmap" \
        --keyring /dev/null >>"$dir/log/setup.log" 2>&1 ||
        fail_start "ceph-mon --mkfs failed" "$dir/log/setup.log"
    : >"$dir/mon/keyring"
    daemon mon "$dir/log/mon.out" ceph-mon --conf "$dir/ceph.conf" --id a -f
    # listening is enough: the setup commands retry until it answers (a
    # ceph command costs 0.3 s of CPU, a connection nothing)
    while [ "$SECONDS" -lt "$deadline" ]; do
        running "$dir/mon.pid" || return 1
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

do_start() {
    local osds=${1:-1} uuid id attempt init f n up
    case "$osds" in
    1 | 2 | 3) ;;
    *) echo "ceph-micro: OSDS must be 1, 2 or 3" >&2; exit 2 ;;
    esac
    for c in ceph-mon ceph-osd ceph monmaptool rbd uuidgen python3; do
        command -v "$c" >/dev/null || {
            echo "ceph-micro: $c not found (scripts/install-deps.sh installs ceph-mon ceph-osd ceph-common)" >&2
            exit 1
        }
    done
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    if pid_alive "$dir/mon.pid"; then
        echo "ceph-micro: a cluster is running in $dir already" >&2
        exit 1
    fi
    # The port may be taken between free_port and the monitor's bind
    # (another cluster starting): a monitor that exits at once gets
    # another port, up to 5 times.
    for ((attempt = 1; ; attempt++)); do
        start_mon && break
        if [ "$attempt" -ge 5 ] || [ "$SECONDS" -ge "$deadline" ] ||
            ! grep -qs 'Address already in use' "$dir/log/mon.a.log" "$dir/log/mon.out"; then
            fail_start "the monitor did not start or does not answer (${CEPH_MICRO_TIMEOUT:-90} s)" \
                "$dir/log/mon.a.log"
        fi
        stop_pid "$dir/mon.pid"
    done
    for ((n = 0; n < osds; n++)); do
        uuid=$(uuidgen)
        id=$(setup osd create "$uuid") ||
            fail_start "ceph osd create failed" "$dir/log/setup.log"
        mkdir -p "$dir/osd$id"
        setup osd crush add "osd.$id" 1 root=default >>"$dir/log/setup.log" ||
            fail_start "ceph osd crush add failed" "$dir/log/setup.log"
        ceph-osd --conf "$dir/ceph.conf" --id "$id" --mkfs --osd-uuid "$uuid" \
            >>"$dir/log/setup.log" 2>&1 ||
            fail_start "ceph-osd --mkfs failed" "$dir/log/setup.log"
        daemon "osd$id" "$dir/log/osd$id.out" ceph-osd --conf "$dir/ceph.conf" --id "$id" -f
    done
    # The pool needs the monitor only; "rbd pool init" writes to it, so it
    # ends once the OSDs are up (no polling with ceph commands), and an OSD
    # that exits meanwhile fails the start at once.
    setup osd pool create rbd 8 >>"$dir/log/setup.log" ||
        fail_start "ceph osd pool create failed" "$dir/log/setup.log"
    while :; do
        timeout "$(left)" rbd --conf "$dir/ceph.conf" pool init rbd >>"$dir/log/setup.log" 2>&1 &
        init=$!
        while kill -0 "$init" 2>/dev/null; do
            for f in "$dir"/osd*.pid; do
                running "$f" || fail_start "$(basename "$f" .pid) exited" \
                    "$dir/log/$(basename "$f" .pid | sed 's/osd/osd./').log"
            done
            sleep 0.1
        done
        wait "$init" && break
        [ "$SECONDS" -lt "$deadline" ] ||
            fail_start "rbd pool init failed (are the OSDs up?)" "$dir/log/osd.0.log"
        sleep 0.5
    done
    # one OSD is up once the pool took a write; more: wait for them all
    while [ "$osds" -gt 1 ]; do
        up=$(cephc osd stat -f json 2>/dev/null |
            python3 -c 'import json,sys; print(json.load(sys.stdin)["num_up_osds"])' 2>/dev/null ||
            echo 0)
        [ "$up" = "$osds" ] && break
        [ "$SECONDS" -lt "$deadline" ] ||
            fail_start "only $up of $osds OSDs came up" "$dir/log/osd.0.log"
        sleep 0.2
    done
    echo "CEPH_CONF=$dir/ceph.conf"
}

case "$cmd" in
start) do_start "${3:-1}" ;;
stop) [ -d "$dir" ] && dir=$(cd "$dir" && pwd) && do_stop ;;
kill) [ -d "$dir" ] && dir=$(cd "$dir" && pwd) && do_stop KILL ;;
status)
    [ -d "$dir" ] && dir=$(cd "$dir" && pwd)
    if pid_alive "$dir/mon.pid" && cephc -s >/dev/null 2>&1; then
        echo up
    else
        exit 1
    fi
    ;;
*) usage ;;
esac
