#!/bin/bash
# qimg nbd as nbdcopy, nbdinfo and qemu-img meet it (tools/nbd.c fact 7),
# started with its defaults (no -e, no -t: one client, the server exits
# when it leaves) and with -e 4 -t, each beside qemu-nbd started the same
# way on a copy of the same image:
#  - nbdinfo: multi-conn advertised exactly when qemu-nbd advertises it
#    (-e 1: no, so nbdcopy opens one connection instead of a second one
#    that the limit refuses), size and read-only flag alike;
#  - nbdcopy reads the export into a raw file: the image's contents;
#  - nbdcopy writes a raw file into the export: afterwards the image holds
#    it and qemu-img check is clean (the flush when the last client left);
#  - qemu-img convert reads the export.
. "${0%/*}/../common.sh"
requires qimg qimg-nbd-plugin nbdkit nbdinfo nbdcopy qemu-img qemu-io qemu-nbd python3

"$QEMU_IMG" create -q -f qcow2 d.qcow2 64M
"$QEMU_IO" -c 'write -P 0x11 0 4M' -c 'write -z 8M 1M' -c 'write -P 0x12 30M 64k' \
    -c 'write -P 0x13 63M 1M' d.qcow2 >/dev/null
"$QEMU_IMG" convert -O raw d.qcow2 ref.raw
"$QEMU_IMG" create -q -f raw src.raw 64M
"$QEMU_IO" -f raw -c 'write -P 0x21 1M 3M' -c 'write -P 0x22 40M 2M' src.raw >/dev/null
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; _cleanup' EXIT

# serve TOOL IMAGE OPTS...: start TOOL's server on TOOL.sock; srv=its pid.
# Used once it answered a handshake (nbd_ready) with -t; without -t that
# handshake would be its one client: once it listens (nbd_listening).
serve() {
    local tool=$1 img=$2
    shift 2
    rm -f "$tool.sock" "$tool.pid"
    if [ "$tool" = qimg ]; then
        "$QIMG" nbd "$@" -k "$PWD/$tool.sock" --pid-file "$PWD/$tool.pid" "$img" \
            2>>"$tool.err" &
    else
        qemu-nbd "$@" -f qcow2 -k "$PWD/$tool.sock" --pid-file "$PWD/$tool.pid" "$img" \
            2>>"$tool.err" &
    fi
    srv=$!
    pids+=($srv)
    if [[ " $* " == *" -t "* ]]; then
        nbd_ready "$tool.sock" $srv || finish
    else
        nbd_listening "$tool.sock" "$tool.pid" $srv || finish
    fi
}
uri() { echo "nbd+unix:///?socket=$PWD/$1.sock"; }
# the flags of the first export that both servers must agree on
flags() {
    python3 -c '
import json, sys
e = json.load(sys.stdin)["exports"][0]
print(" ".join("%s=%s" % (k, e.get(k)) for k in
      ("export-size", "is_read_only", "can_multi_conn", "can_flush", "can_trim", "can_zero")))'
}
# stop: a -t server is stopped; one without -t must have exited by itself
stop() { # MODE
    if [ -n "$1" ]; then
        stop_server "$srv" "$tool $mode_name"
    else
        server_left "$srv" "$tool $mode_name: the server that ends with its client"
    fi
}

for mode in "" "-e 4 -t"; do
    mode_name=${mode:-defaults}
    # shellcheck disable=SC2086 # $mode is a list of options
    for tool in qemu-nbd qimg; do
        # nbdinfo
        serve $tool d.qcow2 $mode
        timeout 60 nbdinfo --json "$(uri $tool)" 2>"$tool.info.err" |
            flags >"$tool.$mode_name.flags"
        stop "$mode"
        # nbdcopy reading, qemu-img convert reading
        serve $tool d.qcow2 $mode
        rm -f out.raw
        assert_rc "$tool $mode_name: nbdcopy reads the export" 0 \
            timeout 60 nbdcopy "$(uri $tool)" out.raw
        assert_rc "$tool $mode_name: what nbdcopy read is the image" 0 cmp out.raw ref.raw
        [ -n "$mode" ] || { stop ""; serve $tool d.qcow2 $mode; }
        rm -f conv.raw
        assert_rc "$tool $mode_name: qemu-img convert reads the export" 0 \
            timeout 60 "$QEMU_IMG" convert -f raw -O raw "$(uri $tool)" conv.raw
        assert_rc "$tool $mode_name: what qemu-img read is the image" 0 cmp conv.raw ref.raw
        stop "$mode"
        # nbdcopy writing into a copy
        cp d.qcow2 w.qcow2
        serve $tool w.qcow2 $mode
        assert_rc "$tool $mode_name: nbdcopy writes into the export" 0 \
            timeout 60 nbdcopy src.raw "$(uri $tool)"
        stop "$mode"
        assert_rc "$tool $mode_name: the image holds what nbdcopy wrote" 0 \
            "$QEMU_IMG" compare -f raw -F qcow2 src.raw w.qcow2
        assert_rc "$tool $mode_name: check clean" 0 "$QEMU_IMG" check w.qcow2
    done
    assert_eq "$mode_name: nbdinfo sees what qemu-nbd shows" \
        "$(cat "qemu-nbd.$mode_name.flags")" "$(cat "qimg.$mode_name.flags")"
done
# the cases differ where they should
_checks=$((_checks + 1))
grep -q 'can_multi_conn=False' qemu-nbd.defaults.flags &&
    grep -q 'can_multi_conn=True' "qemu-nbd.-e 4 -t.flags" ||
    _fail "qemu-nbd's multi-conn: $(cat qemu-nbd.*.flags)"
finish
