# iotests/nbd_hostile.sh: sourced after common.sh by the tests that run
# iotests/nbd_hostile.py (173, 195).  The caller sets sock (the server's
# Unix socket path) and srv= (empty), and kills $srv in its EXIT trap.
#
# hostile_serve MODE [ARGS...]: a fresh nbd_hostile.py server in MODE on
# $sock (its pid in srv, its output in srv.log), once it listens.  Its
# log is removed first: the last server's "listening" is not this one's.
# Up to 60 s: python3 alone took 2.6 s to start on a loaded machine (not
# wait_sock's check: the socket exists before the server listens); 60 s
# only bounds a broken server.
hostile_serve() {
    local _i
    hostile_stop
    rm -f "$sock" srv.log
    python3 "$IOTESTS_DIR/nbd_hostile.py" "$sock" "$@" >srv.log 2>&1 &
    srv=$!
    for ((_i = 0; _i < 1200; _i++)); do
        holds srv.log listening && return 0
        kill -0 "$srv" 2>/dev/null || break
        _nap 0.05
    done
    _fail "the server ($1) did not start: $(cat srv.log)"
    exit 1
}

# hostile_stop: end the server hostile_serve started, if any.
hostile_stop() {
    [ -z "$srv" ] || { kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null; }
    srv=
}
