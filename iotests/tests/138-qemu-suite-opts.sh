#!/bin/bash
# qemu-io's options and messages where QEMU's own iotests read them (issue
# 29, branch qsuite5), each against qemu-io 7.2 on the same input:
#  - an export the NBD server does not have: "Requested export not
#    available" and the server's own text under it (QEMU 140 143);
#  - copy-on-read (-C, block/cor.c): reads through a backing chain write
#    what they read into the top image, whole clusters, zeros as zero
#    clusters, also through aio_read and -i io_uring; the same allocation
#    (map --output=json), contents and check as after qemu-io -C; -C with
#    -r refused (QEMU 197);
#  - driver=copy-on-read (QEMU's filter: its child's options, a child
#    without a driver is the file itself), -r refused (QEMU 215);
#  - driver=file, host_device, host_cdrom as the image: QEMU's checks of
#    the kind of file and their words (QEMU 226); a read past the end of
#    such an image fails (EIO) as in QEMU;
#  - convert -O qcow2 into an NBD export (QEMU 302): the export is the
#    image's file, as qemu-img's "simple" create takes it;
#  - bitmap --merge from an overlay (-b) into its own backing file: no
#    lock conflict, the bits qemu-img merges (qemu-img-bitmaps).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io qemu-nbd nbdinfo

# ---- NBD: an export the server does not have (140 143) ----
"$QEMU_IMG" create -q -f qcow2 n.qcow2 1M
qemu-nbd -t -k "$PWD/n.sock" -x there -f qcow2 n.qcow2 &
npid=$!
trap 'kill $npid 2>/dev/null; _cleanup' EXIT
nbd_ready n.sock $npid || finish
same_as_qemu_io "export not there" -f raw -c 'read 0 512' "nbd+unix:///gone?socket=$PWD/n.sock"
same_as_qemu_io "export there" -f raw -c 'read 0 512' "nbd+unix:///there?socket=$PWD/n.sock"
stop_server $npid qemu-nbd

# ---- copy-on-read (197) ----
# cor DIR TOOL...: a fresh 3-layer chain in DIR, read there with TOOL -C
cor() {
    local d=$1
    shift
    mkdir -p "$d" && cd "$d" || exit 1
    rm -f b.qcow2 m.qcow2 w.qcow2
    "$QEMU_IMG" create -q -f qcow2 b.qcow2 4G
    "$QEMU_IO" -c 'write -P 55 3G 1k' -c 'write -P 7 64k 200k' b.qcow2 >/dev/null
    "$QEMU_IMG" create -q -f qcow2 -F qcow2 -b b.qcow2 m.qcow2
    "$QEMU_IO" -c 'write -P 8 128k 4k' m.qcow2 >/dev/null
    "$QEMU_IMG" create -q -f qcow2 -F qcow2 -b m.qcow2 w.qcow2
    "$QEMU_IO" -f qcow2 -c 'write -z -u 1M 64k' -c 'write -P 9 2M 1k' w.qcow2 >/dev/null
    "$@" -f qcow2 -C -c 'read -P 0 1M 128k' -c 'read 0 0' -c 'read -P 7 70k 10k' \
        -c 'read -P 8 130k 1k' -c 'read -v 2M 16' -c 'read 1500k 2M' \
        -c "read -P 0 $((3 * 1024 * 1024 * 1024 + 1024)) 1k" w.qcow2 >io.out 2>&1
    "$@" -f qcow2 -C -c 'aio_read -P 0 40M 70k' -c aio_flush w.qcow2 >>io.out 2>&1
    "$QEMU_IMG" map --output=json -f qcow2 w.qcow2 | sed 's/"offset": [0-9]*/"offset": X/'
    cd ..
}
assert_eq "-C: allocation" "$(cor q "$QEMU_IO")" "$(cor m "$QIMG" io)"
assert_eq "-C: output" "$(io_filter <q/io.out)" "$(io_filter <m/io.out)"
assert_rc "-C: contents" 0 "$QEMU_IMG" compare -f qcow2 -F qcow2 q/w.qcow2 m/w.qcow2
assert_rc "-C: check" 0 "$QEMU_IMG" check -q m/w.qcow2
assert_eq "-C: io_uring" "$(cor m "$QIMG" io -i io_uring)" "$(cor q "$QEMU_IO")"
same_as_qemu_io "-C -r" -f qcow2 -C -r -c 'read 0 64k' m/w.qcow2

# ---- driver=copy-on-read (215) ----
# corf DIR OPEN-ARGS: a fresh 2-layer chain in DIR, read through the filter
corf() {
    local d=$1
    shift
    mkdir -p "$d" && cd "$d" || exit 1
    rm -f b.qcow2 w.qcow2
    "$QEMU_IMG" create -q -f qcow2 b.qcow2 16M
    "$QEMU_IO" -c 'write -P 5 0 3M' b.qcow2 >/dev/null
    "$QEMU_IMG" create -q -f qcow2 -F qcow2 -b b.qcow2 w.qcow2
    "$@" -c 'read -P 5 100k 1M' -c 'read -P 0 8M 4k' >io.out 2>&1
    "$QEMU_IMG" map --output=json -f qcow2 w.qcow2 | sed 's/"offset": [0-9]*/"offset": X/'
    cd ..
}
for o in "open -o driver=copy-on-read,file.driver=qcow2 w.qcow2" \
    "open -o driver=copy-on-read w.qcow2" "open -r -o driver=copy-on-read,file.driver=qcow2 w.qcow2" \
    "open -o driver=copy-on-read,file.driver=qcow2,file.file.filename=w.qcow2"; do
    assert_eq "$o: allocation" "$(corf q "$QEMU_IO" -c "$o")" "$(corf m "$QIMG" io -c "$o")"
    assert_eq "$o: output" "$(io_filter <q/io.out)" "$(io_filter <m/io.out)"
done
assert_eq "json: copy-on-read" \
    "$(corf q "$QEMU_IO" "json:{'driver':'copy-on-read','file':{'driver':'qcow2','file':{'filename':'w.qcow2'}}}")" \
    "$(corf m "$QIMG" io "json:{'driver':'copy-on-read','file':{'driver':'qcow2','file':{'filename':'w.qcow2'}}}")"

# ---- driver=file, host_device, host_cdrom (226) ----
mkdir -p dir
"$QEMU_IMG" create -q -f qcow2 f.qcow2 1M
for p in file host_device host_cdrom; do
    for o in "-r -o driver=$p,filename=dir" "-r -o driver=$p,filename=/dev/null,locking=off" \
        "-o driver=$p,filename=dir" "-o driver=$p,filename=/dev/null,locking=off" \
        "-o driver=$p,filename=f.qcow2"; do
        # (QEMU's host_cdrom fails reads without a medium: not read here)
        r=(-c 'read -v 0 8')
        [ $p = host_cdrom ] && r=()
        same_as_qemu_io "open $o" -c "open $o" "${r[@]}"
    done
done

# ---- convert into an NBD export (302) ----
"$QEMU_IMG" create -q -f qcow2 cs.qcow2 64M
"$QEMU_IO" -c 'write -P 3 0 100k' -c 'write -P 4 10M 64k' cs.qcow2 >/dev/null
truncate -s 2M eq.raw em.raw
qemu-nbd -t -k "$PWD/eq.sock" -f raw eq.raw &
qpid=$!
qemu-nbd -t -k "$PWD/em.sock" -f raw em.raw &
mpid=$!
trap 'kill $qpid $mpid 2>/dev/null; _cleanup' EXIT
{ nbd_ready eq.sock $qpid && nbd_ready em.sock $mpid; } || finish
"$QEMU_IMG" convert -f qcow2 -O qcow2 -c cs.qcow2 "nbd+unix:///?socket=$PWD/eq.sock"
assert_rc "convert into an export" 0 \
    "$QIMG" convert -f qcow2 -O qcow2 -c cs.qcow2 "nbd+unix:///?socket=$PWD/em.sock"
assert_eq "convert into an export: check" \
    "$("$QEMU_IMG" check -f qcow2 "nbd+unix:///?socket=$PWD/eq.sock" 2>&1)" \
    "$("$QEMU_IMG" check -f qcow2 "nbd+unix:///?socket=$PWD/em.sock" 2>&1)"
assert_rc "convert into an export: contents" 0 \
    "$QEMU_IMG" compare -F qcow2 cs.qcow2 "nbd+unix:///?socket=$PWD/em.sock"
stop_server $qpid qemu-nbd
stop_server $mpid qemu-nbd

# ---- bitmap --merge from an overlay into its backing file (qemu-img-bitmaps) ----
"$QEMU_IMG" create -q -f qcow2 bb.qcow2 10M
"$QEMU_IMG" create -q -f qcow2 -F qcow2 -b bb.qcow2 ov.qcow2
"$QEMU_IMG" bitmap --add ov.qcow2 b2
"$QEMU_IO" -c 'write 1M 64k' -c 'write 5M 300k' ov.qcow2 >/dev/null
cp bb.qcow2 bq.qcow2
"$QEMU_IMG" rebase -u -F qcow2 -b bq.qcow2 ov.qcow2
run_both bitmap --add --merge b2 -b ov.qcow2 -F qcow2 -f qcow2 bq.qcow2 b3
"$QEMU_IMG" rebase -u -F qcow2 -b bb.qcow2 ov.qcow2
assert_eq "merge into the backing file: qemu-img" "0" "$Q_RC"
assert_rc "merge into the backing file" 0 \
    "$QIMG" bitmap --add --merge b2 -b ov.qcow2 -F qcow2 -f qcow2 bb.qcow2 b3
assert_eq "merge into the backing file: bits" "$(dirty_map bq.qcow2 b3)" \
    "$(dirty_map bb.qcow2 b3)"

finish
