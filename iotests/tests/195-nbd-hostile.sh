#!/bin/bash
# 195-nbd-hostile: qimg's NBD client against a server that misbehaves
# (iotests/nbd_hostile.py, one way of misbehaving per MODE): a clear
# error and a non-zero exit, never a crash, a hang or unbounded memory
# (DESIGN "Images from strangers"; block/nbd.c invariants 2 and 10,
# block/nbd-connect.c fact 2), with qemu-io and
# qemu-img 7.2 on the same server as the oracle where they behave:
#  - the same failure as qemu-io: a reply with a cookie nobody asked for
#    (simple and structured), a simple read reply cut short by a close,
#    an export of 2^63 - 2^30 bytes (QEMU's largest) and more;
#  - where QEMU 7.2 does worse, qimg refuses: a structured read reply
#    that covers half the read (qemu-io returns its buffer's old bytes),
#    a chunk of 4 GiB - 1 (qemu-io waits for it), an error chunk of 4 GiB
#    - 1, a server that closes in the middle of its greeting (qimg
#    polled for the rest forever) or after the client's first option, an
#    option reply of 4 GiB - 1, an export of 2^63 bytes or more (QEMU
#    opens 2^63, refuses 2^64 - 1 by accident), a block status reply
#    (map) with an extent of length 0, for a context never negotiated,
#    or of 4 GiB - 1 (qemu-img map: "Invalid argument" for each, qimg
#    says what was wrong); each under a 512 MiB
#    address-space limit, where allocating what the server announced
#    fails;
#  - a server that never sends its greeting, or never answers a read:
#    qimg waits, as qemu-io does (QEMU 7.2 has no request timeout, and
#    the open is not timed without reconnect-delay), and SIGTERM ends it.
. "${0%/*}/../common.sh"
. "$IOTESTS_DIR/nbd_hostile.sh"
requires qimg qemu-img qemu-io python3

srv=
trap '[ -z "$srv" ] || kill "$srv" 2>/dev/null; _cleanup' EXIT
sock=$PWD/s.sock
uri="nbd+unix:///?socket=$sock"

# on MODE CMD...: CMD against a fresh MODE server, in 512 MiB of address
# space; output in r.out (stdout and stderr), exit code in RC (124: it
# did not end in 60 s)
on() {
    local mode=$1
    shift
    hostile_serve $mode
    (ulimit -v 524288 && exec timeout 60 "$@") >r.out 2>&1
    RC=$?
    hostile_stop
}

# same_io DESC MODE ARGS...: qemu-io ARGS and qimg io ARGS, each against a
# fresh MODE server: the same exit code and output
same_io() {
    local desc=$1 mode=$2 qrc
    shift 2
    on "$mode" "$QEMU_IO" "$@"
    qrc=$RC
    mv r.out q.out
    on "$mode" "$QIMG" io "$@"
    assert_eq "$desc: exit code" "$qrc" "$RC"
    assert_eq "$desc: output" "$(io_filter <q.out)" "$(io_filter <r.out)"
}

# refused DESC MODE WANT CMD...: CMD against a fresh MODE server exits 1
# with output WANT (URI stands for $uri)
refused() {
    local desc=$1 mode=$2 want=$3
    shift 3
    on "$mode" "$@"
    assert_eq "$desc: exit code" 1 "$RC"
    assert_eq "$desc: output" "$want" "$(sed "s|$uri|URI|g" r.out | io_filter)"
}

# waits DESC MODE LINE CMD...: CMD against a fresh MODE server is still
# waiting once the server logged LINE, and SIGTERM ends it (143)
waits() {
    local desc=$1 mode=$2 line=$3 pid rc alive=no
    shift 3
    hostile_serve "$mode"
    "$@" >r.out 2>&1 &
    pid=$!
    for _ in $(seq 1200); do
        grep -qx "$line" srv.log && break
        sleep 0.05
    done
    assert_eq "$desc: the server got that far" "$line" "$(grep -x "$line" srv.log)"
    kill -0 "$pid" 2>/dev/null && alive=yes
    kill "$pid" 2>/dev/null
    wait "$pid"
    rc=$?
    assert_eq "$desc: still waiting" yes "$alive"
    assert_eq "$desc: exit code (SIGTERM)" 143 "$rc"
    hostile_stop
}

rd=(-f raw -c 'read -P 0x5a 0 64k' -c 'read -P 0x5a 64k 64k')

# 1. The same failures as QEMU's.
same_io "a well behaved server" well "${rd[@]}" "$uri"
same_io "a reply's cookie unknown" bad-cookie "${rd[@]}" "$uri"
same_io "a structured reply's cookie unknown" bad-cookie-sr "${rd[@]}" "$uri"
same_io "a simple read reply cut short" short-read-simple "${rd[@]}" "$uri"
same_io "an export of 2^63 - 2^30 bytes" "well 9223372035781033984" \
    -f raw -c 'read -P 0x5a 0 64k' -c 'read -P 0x5a 9223372035781033983 1' "$uri"
same_io "an export of 2^63 - 2^30 + 1 bytes" "well 9223372035781033985" "${rd[@]}" "$uri"
same_io "an export of 2^63 - 1 bytes" "well 9223372036854775807" "${rd[@]}" "$uri"

# 2. Where QEMU does worse.
eio="read failed: Input/output error
read failed: Input/output error"
refused "a structured read reply of half the read" short-read \
    "read failed: Input/output error
read 65536/65536 bytes at offset 65536
64 KiB, X ops; TIME" "$QIMG" io "${rd[@]}" "$uri"
refused "convert, a short read" short-read \
    "qimg: error while reading at byte 0: Input/output error
Could not read 'nbd+unix://?socket=$sock': Could not read from 'nbd+unix://?socket=$sock' at offset 0: Input/output error" \
    "$QIMG" convert -f raw -O raw "$uri" out.raw
refused "a huge structured chunk" huge-chunk "$eio" "$QIMG" io "${rd[@]}" "$uri"
refused "a huge error chunk" huge-error "$eio" "$QIMG" io "${rd[@]}" "$uri"
# an export of 2^63 bytes or more: QEMU opens it, or fails by accident
big="qimg: can't open device URI: Could not refresh total sector count: File too large"
refused "an export of 2^63 bytes" "well 9223372036854775808" "$big" "$QIMG" io "${rd[@]}" "$uri"
refused "an export of 2^64 - 1 bytes" hs-huge-size "$big" "$QIMG" io "${rd[@]}" "$uri"
on "well 9223372036854775808" "$QIMG" info "$uri"
assert_eq "info, an export of 2^63 bytes" \
    "qimg: Could not open 'URI': Could not refresh total sector count: File too large" \
    "$(sed "s|$uri|URI|g" r.out)"

# the handshake broken: libnbd's words for it (qemu-io's differ)
refused "closed in the greeting" hs-close-greeting \
    "qimg: can't open device URI: nbd_connect_socket: recv: server disconnected unexpectedly" \
    "$QIMG" io "${rd[@]}" "$uri"
refused "closed after an option" hs-close-options \
    "qimg: can't open device URI: nbd_connect_socket: recv: server disconnected unexpectedly" \
    "$QIMG" io "${rd[@]}" "$uri"
refused "a huge option reply" hs-huge-option \
    "qimg: can't open device URI: nbd_connect_socket: handshake: invalid NBD_REP_ACK option reply length" \
    "$QIMG" io "${rd[@]}" "$uri"

# block status (map): qemu-img says "Invalid argument" for each
bs="qimg: Could not read file metadata: Could not get block status of 'nbd+unix://?socket=$sock'"
# (stderr alone: the "[" on stdout may come before or after it)
map_err=(bash -c '"$0" map --output=json -f raw "$1" 2>&1 >/dev/null' "$QIMG" "$uri")
refused "map, an extent of length 0" bs-zero-extent \
    "$bs: NBD server 'nbd+unix://?socket=$sock' sent no base:allocation extent at 0" "${map_err[@]}"
refused "map, an unknown context id" bs-unknown-id \
    "$bs: NBD server 'nbd+unix://?socket=$sock' sent no base:allocation extent at 0" "${map_err[@]}"
refused "map, a huge block status chunk" bs-huge \
    "$bs: Could not get the block status of 'nbd+unix://?socket=$sock' at offset 0: Input/output error" \
    "${map_err[@]}"

# 3. Silence: qimg waits as qemu-io does.
waits "qemu-io, no greeting" hs-silent "hs-silent: sent nothing" "$QEMU_IO" "${rd[@]}" "$uri"
waits "qimg, no greeting" hs-silent "hs-silent: sent nothing" "$QIMG" io "${rd[@]}" "$uri"
waits "qemu-io, no answer" silent-read "silent-read: got the read, no answer" \
    "$QEMU_IO" "${rd[@]}" "$uri"
waits "qimg, no answer" silent-read "silent-read: got the read, no answer" \
    "$QIMG" io "${rd[@]}" "$uri"

finish
