#!/bin/bash
# qimg io's commands beyond read/write (011): readv, writev, map, alloc,
# info, open, close, reopen, sigraise, the breakpoint commands, -s, and the
# start with no image -- each against qemu-io 7.2 on the same input: the
# same stdout, stderr (timings and the program name filtered as in 011) and
# exit code, error paths included (tools/io-*.c facts).  The options qimg
# cannot honour are refused with a message (io-open.c header).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

# QEMU iotests' _filter_qemu_io, plus the program names and prompts.
filter() {
    sed -e 's/[0-9]* ops; [0-9/:. sec]* ([0-9/.inf]* [EPTGMKiBbytes]*\/sec and [0-9/.inf]* ops\/sec)/X ops; TIME/' \
        -e 's/^[0-9]*,[0-9]*,[0-9]*:[0-9]*:[0-9.]*,[0-9.inf]*,[0-9.inf]*$/CSV/' \
        -e 's/qemu-io: /qimg: /' -e 's/\(qemu\|qimg\)-io> /PROMPT /g'
}

# both DESC IMG ARGS...: qemu-io ARGS on a copy of IMG (q/img), qimg io
# ARGS on another (m/img), each run in its folder, so that the file names
# in messages agree; IMG "-": no image.  Compares exit codes, outputs and,
# with an image, the contents after.  The commands on standard input are
# those of the file $STDIN (default: none).
mkdir -p q m
both() {
    local desc=$1 img=$2 qrc mrc
    shift 2
    cp "${STDIN:-/dev/null}" stdin.in
    if [ "$img" != - ]; then
        cp "$img" q/img && cp "$img" m/img || exit 1
        set -- "$@" img
    fi
    # (2>/dev/null: bash's "Terminated" for sigraise)
    (cd q && timeout 20 "$QEMU_IO" "$@" >../q.out 2>../q.err <../stdin.in) 2>/dev/null
    qrc=$?
    (cd m && timeout 20 "$QIMG" io "$@" >../m.out 2>../m.err <../stdin.in) 2>/dev/null
    mrc=$?
    assert_eq "$desc: exit code" "$qrc" "$mrc"
    assert_eq "$desc: stdout" "$(filter <q.out)" "$(filter <m.out)"
    assert_eq "$desc: stderr" "$(filter <q.err)" "$(filter <m.err)"
    if [ "$img" != - ]; then
        assert_rc "$desc: contents" 0 "$QEMU_IMG" compare -q q/img m/img
    fi
}

# ---- images: allocated, zero, unallocated, discarded; a backing chain ----
qi create -q -f qcow2 a.qcow2 4M
qio a.qcow2 'write -P 1 0 64k' 'write -z 128k 64k' 'write -P 2 1M 1k' \
    'write -z -u 2M 64k' 'write -P 3 3M 64k' 'discard 3M 64k'
qi create -q -f qcow2 -b a.qcow2 -F qcow2 top.qcow2 5M
qio top.qcow2 'write -P 4 64k 64k' 'write -z 1M 4k'
cp a.qcow2 q/ && cp a.qcow2 m/ # top.qcow2's backing file, next to q/img and m/img
qi create -q -f qcow2 -o compat=0.10 v2.qcow2 1M
qio v2.qcow2 'write -P 5 0 4k' 'write -z 64k 64k'
qi create -q -f qcow2 -o extended_l2=on,cluster_size=128k ext.qcow2 2M
qio ext.qcow2 'write -P 6 4k 4k' 'write -z 64k 8k' 'write -P 7 1M 128k'
qi create -q -f qcow2 -o lazy_refcounts=on,refcount_bits=1,compression_type=zstd \
    lazy.qcow2 700M
qi create -q -f raw r.raw 1M
truncate -s 1000000 odd.raw
qi create -q -f qcow2 odd.qcow2 1000001
qio odd.qcow2 'write 999424 577'
qi create -q -f qcow2 -o data_file=df.raw,data_file_raw=on df.qcow2 1M
cp df.raw q/ && cp df.raw m/

# ---- readv / writev (io-vec.c facts 1-3) ----
both "readv/writev" a.qcow2 -c 'writev -P 5 0 1k 2k' -c 'readv -P 5 0 1k 2k' \
    -c 'readv -v 0 16 16' -c 'readv -P 6 0 512 512' -c 'readv -C 0 1' \
    -c 'writev -C -f 0 1' -c 'writev -q 0 512' -c 'readv -q -P 0xcd 0 512' \
    -c 'writev 0' -c 'readv 0 abc' -c 'writev -P 300 0 1' -c 'readv -x 0 1' \
    -c 'writev 0 3G' -c 'readv 0 1G 1G 1G' -c 'writev 0 0' -c 'readv 4M 1' \
    -c 'readv -v 1 17' -c 'writev -P 0x12 -f 1 1 2 3 0 4k' -c 'readv -P 0x12 1 4106' \
    -c 'writev 4M 512' -c 'writev -C -q 0 1' -c 'writev -x 0 1' -c 'readv -q 0 1 2'
both "readv/writev on raw" r.raw -f raw -c 'writev -P 9 511 1 512 513' \
    -c 'readv -P 9 511 1026' -c 'readv -v 500 20 4'
both "writev read-only" a.qcow2 -r -c 'writev 0 1' -c 'readv -q 0 1'

# ---- map, alloc, info, length (io-map.c facts 1-5) ----
mapcmds=(-c map -c 'alloc 0' -c 'alloc 0 1M' -c 'alloc 64k 64k' -c 'alloc 100k 100k'
    -c 'alloc 4M' -c 'alloc 3M 2M' -c 'alloc 1' -c 'a 0 4M' -c 'alloc x' -c 'alloc 1 x'
    -c 'alloc 5M' -c 'alloc 999999 10' -c 'alloc 0 2M' -c 'alloc 0 0' -c 'alloc'
    -c 'alloc 1 2 3' -c info -c 'i' -c 'info x' -c length -c 'map x')
for img in a.qcow2 top.qcow2 v2.qcow2 ext.qcow2 lazy.qcow2 odd.qcow2 df.qcow2; do
    both "map/alloc/info $img" $img "${mapcmds[@]}"
done
both "map/alloc/info r.raw" r.raw -f raw "${mapcmds[@]}"
both "map/alloc/info odd.raw (probed)" odd.raw -r "${mapcmds[@]}"

# ---- write -c, write -z -u, read -v, truncate, discard, then map ----
qi create -q -f qcow2 -o cluster_size=4k w.qcow2 1000k
both "write variants" w.qcow2 -c 'write -c -P 3 0 64k' -c 'write -c -P 4 996k 4k' \
    -c 'write -c 1024 4k' -c 'write -z -u 64k 16k' -c 'write -z 96k 8k' \
    -c 'read -v 95k 1k' -c 'discard 128k 8k' -c 'write -P 8 200k 12k' \
    -c 'discard 204k 4k' -c map -c 'alloc 0 1000k' -c 'truncate 2M' -c length \
    -c 'truncate 1000001' -c length -c map -c 'truncate x' -c 'truncate -m foo 3M' \
    -c 'truncate -m full 3M' -c 'alloc 2M 1M' -c 'truncate 512k' -c map -c info

# ---- open / close, and no image at the start (io-open.c fact 1) ----
opencmds=(-c 'close' -c 'read 0 1' -c 'close' -c 'open img' -c 'read -P 1 0 1'
    -c 'open img' -c 'c' -c 'o -r img' -c 'write 0 1' -c 'close' -c 'open -x'
    -c 'open' -c 'open a b' -c 'open nonexist' -c 'open -f raw img' -c 'info'
    -c 'open -o driver=qcow2 img' -c 'info' -c 'close' -c 'open -U img'
    -c 'open -r -U img' -c length -c close -c 'open -t foo img' -c 'open -d foo img'
    -c 'open -i foo img' -c 'open -n -t writeback img' -c 'write -q -P 7 0 1' -c close
    -c 'open -i threads img' -c 'aio_read -P 7 0 1' -c 'aio_flush' -c close
    -c 'open -s img' -c 'write -P 8 0 64k' -c 'read -q -P 8 0 64k' -c close
    -c 'open -r img' -c 'read -q -P 7 0 1' -c foo)
both "open/close" a.qcow2 "${opencmds[@]}"
both "-r -s" a.qcow2 -r -s -c 'write 0 1' -c 'read -q -P 1 0 1' -c close \
    -c 'open -r -s img' -c 'write 0 1' -c 'open -r' -c info
cp a.qcow2 q/img
cp a.qcow2 m/img
nofile=(-c 'read 0 1' -c 'foo' -c help -c 'sleep 1' -c 'sigraise 0' -c map -c alloc
    -c info -c length -c flush -c truncate -c discard -c readv -c writev -c aio_read
    -c aio_write -c aio_flush -c reopen -c break -c remove_break -c resume
    -c wait_break -c close -c 'open img' -c 'read -P 1 0 1' -c 'length')
both "no image" - "${nofile[@]}"
printf 'read 0 1\n\nopen -r img\nread -P 1 0 64k\nclose\nlength\nquit\nlength\n' >cmds.in
STDIN=cmds.in both "no image, commands on stdin" -

# ---- reopen (io-open.c fact 2) ----
both "reopen" a.qcow2 -c 'reopen -r -w' -c 'reopen a' -c 'reopen -x' \
    -c 'reopen -c foo' -c 'reopen -r' -c 'write 0 1' -c 'reopen -w' -c 'write -q 0 1' \
    -c 'reopen -c none' -c 'write -q -P 2 0 1' -c 'reopen -c writeback -r' \
    -c 'read -q -P 2 0 1' -c 'write 0 1' -c 'reopen' -c 'write 0 1' -c 'reopen -w' \
    -c 'aio_write -P 3 0 4k' -c 'reopen -r' -c 'read -q -P 3 0 4k'
both "requests in flight at close and reopen" a.qcow2 -c 'aio_write -P 7 0 64k' \
    -c 'close' -c 'open img' -c 'read -P 7 0 64k' -c 'aio_write -P 8 0 4k' \
    -c 'reopen -r' -c 'read -P 8 0 4k' -c 'aio_read -P 8 0 4k' -c 'quit'
both "open -o, reopen -o: cache.direct, cache.no-flush" a.qcow2 \
    -c 'reopen -o cache.direct=on' -c 'write -q -P 5 0 1' \
    -c 'reopen -o cache.no-flush=on,cache.direct=off' -c 'write -q 0 1' \
    -c 'reopen -o cache.no-flush=off' -c 'reopen -o driver=raw' \
    -c 'reopen -o cache.direct=x' -c 'reopen -c writethrough -o cache.no-flush=on' \
    -c 'close' -c 'open -o cache.direct=on,driver=qcow2 img' -c 'read -q -P 205 0 1' \
    -c 'close' -c 'open -o cache.no-flush=maybe img' -c 'open -n -o cache.direct=off img' \
    -c 'flush' -c 'reopen -r -o cache.direct=on' -c 'write 0 1'
both "reopen read-only at the start" a.qcow2 -r -c 'reopen -w' -c 'write -q -P 4 0 1' \
    -c 'read -q -P 4 0 1'
# a writer elsewhere: -w must fail on the write lock, the image stays open
# read-only (each tool against its own holder)
cp a.qcow2 q/img
cp a.qcow2 m/img
hold_image q/img
qhold=$HOLDER
hold_image m/img
mhold=$HOLDER
(cd q && "$QEMU_IO" -r -U -c 'reopen -w' -c 'read -q -P 1 0 1' -c 'write 0 1' \
    -c 'length' img >../q.out 2>../q.err)
qrc=$?
(cd m && "$QIMG" io -r -U -c 'reopen -w' -c 'read -q -P 1 0 1' -c 'write 0 1' \
    -c 'length' img >../m.out 2>../m.err)
assert_eq "reopen -w against a writer: exit code" "$qrc" "$?"
assert_eq "reopen -w against a writer: stdout" "$(cat q.out)" "$(cat m.out)"
assert_eq "reopen -w against a writer: stderr" "$(filter <q.err)" "$(filter <m.err)"
kill "$qhold" "$mhold" 2>/dev/null
wait "$qhold" "$mhold" 2>/dev/null

# ---- sigraise, breakpoints without a blkdebug node ----
both "sigraise" a.qcow2 -c 'sigraise 0' -c 'sigraise x' -c 'sigraise 1x' \
    -c 'sigraise -1' -c 'sigraise 999' -c 'sigraise 66' -c 'sigraise' \
    -c 'break write_aio a' -c 'break a' -c 'remove_break a' -c 'resume a' \
    -c 'write -q 0 1' -c 'sigraise 15' -c 'write 0 1'
both "sigraise 9" a.qcow2 -c 'write -q -P 9 0 1' -c 'sigraise 9'

# ---- -s: a temporary overlay, the image untouched (io-open.c fact 5) ----
both "-s" a.qcow2 -s -c 'write -P 9 0 64k' -c 'read -q -P 9 0 64k' -c map -c info \
    -c length -c 'alloc 0 128k' -c 'truncate 8M' -c length
assert_rc "-s left the image as it was" 0 "$QEMU_IMG" compare -q a.qcow2 m/img
both "-s raw" r.raw -s -f raw -c 'writev -P 9 0 64k 1' -c map -c info

# ---- -m: buffers 16 bytes off alignment, bounced under cache=none ----
both "-m -n" a.qcow2 -m -n -c 'write -P 5 512 4k' -c 'read -P 5 512 4k' \
    -c 'writev -P 6 8k 1k 3k' -c 'readv -P 6 8k 3k 1k' -c 'aio_write -P 7 64k 4k' \
    -c 'aio_flush' -c 'aio_read -P 7 64k 4k' -c 'aio_flush' -c 'read -v 512 32'
both "-m" a.qcow2 -m -c 'write -P 5 0 4k' -c 'read -P 5 0 4k'

# ---- --object: secrets as qemu-io takes them (tools/objects.c) ----
both "--object secret" a.qcow2 --object secret,id=s0,data=x -c 'read -q 0 1'
both "--object without data" a.qcow2 --object secret,id=s0 -c 'read -q 0 1'
both "--object unknown type" a.qcow2 --object foo,id=x -c 'read -q 0 1'

# copy-on-read (block/cor.c; 138 compares the allocation it leaves): -C
# and open -C read as qemu-io does, -C with -r is refused in its words
both "-C" top.qcow2 -C -c 'read -q -P 1 0 64k'
cp top.qcow2 q/c.qcow2 && cp top.qcow2 m/c.qcow2
both "open -C" - -c 'open -C c.qcow2' -c 'read -q -P 1 0 64k'
assert_rc "open -C: contents" 0 "$QEMU_IMG" compare -q q/c.qcow2 m/c.qcow2
both "-C -r" top.qcow2 -C -r -c 'read -q 0 1'

# ---- what qimg refuses: a message, exit 1 ----
refused() {
    local desc=$1 want=$2 rc
    shift 2
    (cd m && "$QIMG" io "$@" >../m.out 2>../m.err)
    rc=$?
    assert_eq "$desc: refused" "1 $want" "$rc $(grep -o -e "$want" m.err m.out | head -n 1 |
        cut -d: -f2-)"
}
cp a.qcow2 m/img
refused "-k" "aio=native (-k) is not supported by qimg" -k -c 'read 0 1' img
refused "-T" "tracing (-T) is not supported by qimg" -T foo -c 'read 0 1' img
refused "-d ignore" "discard=ignore is not supported by qimg" -d ignore -c 'read 0 1' img
refused "O_DIRECT without flushes" "qimg has no cache mode with cache.no-flush=on and" \
    -c 'reopen -o cache.direct=on,cache.no-flush=on' img
refused "reopen -s" "reopen of a -s (snapshot) image is not supported by qimg" -s \
    -c 'reopen -r' img
# qemu-io waits for ever (io-break.c)
refused "wait_break" "wait_break: no request in flight can reach breakpoint 'a'" \
    -c 'wait_break a' img
refused "-s over blkdebug:" "-s (snapshot) is not supported by qimg over a blkdebug:" \
    -s -c 'read 0 1' "blkdebug::img"
# --image-opts names the image by options (api/json-name.c), as qemu-io
cp a.qcow2 q/img && cp a.qcow2 m/img
both "--image-opts" - --image-opts -c 'read -P 0 0 4k' -c map driver=qcow2,file.filename=img
# -d unmap is what qimg does: accepted
both "-d unmap" a.qcow2 -d unmap -c 'discard 0 64k' -c map

# ---- help: the list, each command's extended help, aliases (io-help.c) ----
helps=(-c help)
for c in $("$QEMU_IO" -c help | awk 'NF > 2 && $1 != "Use" { print $1 }') r w ? a foo; do
    helps+=(-c "help $c")
done
both "help" - "${helps[@]}"

# ---- the prompt under the qemu-io personality: byte for byte ----
ln -s "$QIMG" m/qemu-io
cp a.qcow2 q/img
cp a.qcow2 m/img
printf 'read -P 1 0 1\nlength\nfoo\nopen img\nclose\nclose\n' >p.in
(cd q && "$QEMU_IO" img <../p.in >../q.out 2>../q.err)
qrc=$?
(cd m && ./qemu-io img <../p.in >../m.out 2>../m.err)
assert_eq "qemu-io personality: exit code" "$qrc" "$?"
assert_eq "qemu-io personality: stdout" "$(filter <q.out | sed 's/PROMPT/qemu-io> /g')" \
    "$(filter <m.out | sed 's/PROMPT/qemu-io> /g')"
assert_eq "qemu-io personality: stderr" "$(cat q.err)" "$(cat m.err)"
(cd m && "$QIMG" io img <../p.in >../m.out 2>&1)
assert_eq "qimg io prompt" "qimg-io> " "$(head -c 9 m.out)"

finish
