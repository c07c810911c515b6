#!/bin/bash
# Reading VMDK (vmdk/): images qemu-img 7.2 creates in every subformat,
# written by qemu-io across extent and grain-table boundaries, delta disks,
# and hand-built images (090-vmdkgen.py) for what qemu-img cannot make
# (VMware's streamOptimized with markers and footer, vmfsSparse COWD and
# seSparse extents, several extents with RDONLY lines, a chain of three
# delta disks).  Against qemu-img: convert -O raw identical, map (JSON and
# human) and info --backing-chain (JSON and human) equal, compare clean,
# check, measure and dd equal; libvmdk (pyvmdk) reads the same bytes; the
# async API (qimg bench) and qimg nbd serve them.  Malformed images of each
# class fail with a message naming the problem, never a crash or hang.  A
# 1 TiB sparse image is mapped and converted in bounded memory.
# make test: libvmdk reads every byte where the image has data and the
# first and last MiB of each hole, the hand-built images are 40 MiB (24
# of 4 KiB grains), the ASan build runs check on every other malformed
# one and convert on the others (an ASan start costs ~0.1 s of CPU here:
# each class's open path meets the checked build once; the normal build
# runs all four commands on all of them); QIMG_LONG=1: libvmdk reads every
# byte, 72 MiB, all four commands under ASan too.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3 vmdkinfo

GEN=("python3" "$IOTESTS_DIR/tests/090-vmdkgen.py")
# libvmdk's Python binding, the independent reader (Debian python3-libvmdk
# installs it for the system's python3)
PYVMDK=
for py in python3 /usr/bin/python3; do
    if "$py" -c 'import pyvmdk' 2>/dev/null; then
        PYVMDK=$py
        break
    fi
done
[ -n "$PYVMDK" ] || missing "python3-libvmdk (pyvmdk) not found"

# raw_qimg IMG / raw_qemu IMG: convert -O raw IMG into m.raw / q.raw
# (sparse: they are compared with sparse_cmp, whose cost is the data's).
raw_qimg() { rm -f m.raw && "$QIMG" convert -O raw "$1" m.raw; }
raw_qemu() { rm -f q.raw && "$QEMU_IMG" convert -O raw "$1" q.raw; }

# libvmdk_same DESC RAW IMG [PARENT...]: libvmdk (pyvmdk) reads IMG, opened
# with its parents, as the bytes of RAW.  Where RAW has data every byte is
# compared; its holes must read as zeros: every byte of them with
# QIMG_LONG=1, in make test the first and last MiB of each hole (libvmdk
# reads a flat extent's holes from the file: seconds for 3 GiB).
libvmdk_same() {
    local desc=$1
    shift
    _checks=$((_checks + 1))
    "$PYVMDK" - "${QIMG_LONG:-}" "$@" >.lv.out 2>&1 <<'EOF' || _fail "$desc: $(cat .lv.out)"
import os, sys
import pyvmdk
full, raw, chain = sys.argv[1] != "", sys.argv[2], sys.argv[3:]
handles = []
for name in reversed(chain):    # the image, then its parents
    h = pyvmdk.handle()
    h.open(name)
    h.open_extent_data_files()
    if handles:
        h.set_parent(handles[-1])
    handles.append(h)
h, fd, MiB = handles[-1], os.open(raw, os.O_RDONLY), 1 << 20
size, zero = os.fstat(fd).st_size, bytes(MiB)
if h.get_media_size() != size:
    sys.exit("libvmdk: media size %d, expected %d" % (h.get_media_size(), size))
def same(start, end, data):
    off = start
    while off < end:
        n = min(MiB, end - off)
        got = h.read_buffer_at_offset(n, off)
        want = os.pread(fd, n, off) if data else zero[:n]
        if got != want:
            sys.exit("libvmdk reads other bytes in [%d, %d)" % (off, off + n))
        off += n
off = 0
while off < size:
    try:
        data = os.lseek(fd, off, os.SEEK_DATA)
    except OSError:
        data = size
    if full or data - off <= 2 * MiB:
        same(off, data, False)
    else:
        same(off, off + MiB, False)
        same(data - MiB, data, False)
    if data < size:
        off = os.lseek(fd, data, os.SEEK_HOLE)
        same(data, off, True)
    else:
        off = size
EOF
}

# vmdkinfo (libvmdk's tool) sees qimg info's size, CIDs and extent count
# (both read by one python3: the first line qimg's, the second vmdkinfo's)
vmdkinfo_of() {
    local j=() l
    vmdkinfo "$1" >vi.out 2>&1
    "$QIMG" info --output=json "$1" >qi.json
    while IFS= read -r l; do j+=("$l"); done < <(python3 -c 'import json, re, sys
try:
    i = json.load(open("qi.json"))
    d = i["format-specific"]["data"]
    print(i["virtual-size"], "0x%08x" % d["cid"], "0x%08x" % d["parent-cid"], len(d["extents"]))
except Exception as e:
    print("qimg info: %r" % e)
try:
    t = open("vi.out").read()
    def f(k): return re.search(k + r":\s*(.*)", t).group(1).strip()
    size = re.search(r"\((\d+) bytes\)", f("Media size")).group(1)
    print(size, f("Content identifier"), f("Parent content identifier"), f("Number of extents"))
except Exception as e:
    print("vmdkinfo: %r" % e)')
    assert_eq "$1: vmdkinfo" "${j[0]:-qimg info: none}" "${j[1]:-vmdkinfo: none}"
}

# the same answers as qemu-img, for every read-only command (qemu-img's
# raw image left in q.raw)
same_reads() {
    local img=$1
    same_as_qemu info --output=json --backing-chain "$img"
    same_as_qemu info --backing-chain "$img"
    same_as_qemu map --output=json "$img"
    same_as_qemu map "$img"
    same_as_qemu check "$img"
    same_as_qemu check --output=json "$img"
    same_as_qemu measure -O qcow2 "$img"
    same_as_qemu compare "$img" "$img"
    raw_qemu "$img" && raw_qimg "$img"
    same_file "$img: convert -O raw" q.raw m.raw
    rm -f q.dd m.dd
    "$QEMU_IMG" dd if="$img" of=q.dd bs=1M count=3 skip=2
    "$QIMG" dd if="$img" of=m.dd bs=1M count=3 skip=2
    assert_rc "$img: dd" 0 cmp q.dd m.dd
}

# ---- images qemu-img makes, in every subformat ----
for sf in monolithicSparse monolithicFlat twoGbMaxExtentSparse twoGbMaxExtentFlat; do
    "$QEMU_IMG" create -q -f vmdk -o subformat=$sf $sf.vmdk 3G || exit 1
    # data at the start, across the 2 GiB extent boundary and the 32 MiB
    # grain-table boundary, a zero write, the last byte
    qio $sf.vmdk 'write -P 0x11 0 100k' 'write -P 0x12 2047M 2M' \
        'write -P 0x13 31M 2M' 'write -z 40M 1M' 'write -P 0x14 3071M 1M'
    same_reads $sf.vmdk
    libvmdk_same "$sf: libvmdk reads what qemu-img reads" q.raw $sf.vmdk
    vmdkinfo_of $sf.vmdk
done
"$QEMU_IMG" create -q -f vmdk -o zeroed_grain=on zg.vmdk 256M
qio zg.vmdk 'write -P 0x21 0 4M' 'write -z 1M 1M' 'write -z 100M 64k' 'write -P 1 255M 1M'
same_reads zg.vmdk # (libvmdk 20200926 reads a zeroed grain entry as sector 1)
head -c 20M /dev/urandom >r.raw
head -c 20M /dev/zero >>r.raw
"$QEMU_IMG" convert -O vmdk -o subformat=streamOptimized r.raw so.vmdk
same_reads so.vmdk
libvmdk_same "streamOptimized: libvmdk" q.raw so.vmdk
vmdkinfo_of so.vmdk
same_file "streamOptimized: the source" r.raw m.raw
# vmdk.c invariant 4, grain.c invariant 2: a convert reads a run of
# compressed grains with a few requests, not one or two a grain.  The
# requests are counted with the fault node: the smallest nth= whose read
# fault is never reached is the count + 1.  (2 MiB of random data: 32
# grains; one request a run, one more when the last record ends past it.)
reads_of() { # reads_of io|convert: read requests on rc.vmdk's file
    local k img
    for k in $(seq 1 200); do
        img="blkdebug:event=any,op=read,nth=$k:rc.vmdk"
        rm -f rc.raw
        case $1 in
        io) "$QIMG" io -r -f vmdk -c "read 0 512" "$img" ;;
        convert) "$QIMG" convert -f vmdk -O raw "$img" rc.raw ;;
        esac >/dev/null 2>&1 && break
    done
    echo "$k"
}
head -c 2M r.raw >rc.src
"$QEMU_IMG" convert -f raw -O vmdk -o subformat=streamOptimized rc.src rc.vmdk
one=$(reads_of io)   # the open and one grain
all=$(reads_of convert)
_checks=$((_checks + 1))
[ "$one" -lt 200 ] && [ "$all" -lt 200 ] && [ $((all - one)) -le 3 ] ||
    _fail "convert of 32 compressed grains: $((all - one)) read requests more than a read of one grain ($all, $one)"
same_file "2 MiB of compressed grains converted" rc.src rc.raw

# delta disks qemu-img creates (backing_file): a chain of three
"$QEMU_IMG" create -q -f vmdk base.vmdk 64M
qio base.vmdk 'write -P 0x31 0 8M'
"$QEMU_IMG" create -q -f vmdk -b base.vmdk -F vmdk mid.vmdk
qio mid.vmdk 'write -P 0x32 4M 8M'
"$QEMU_IMG" create -q -f vmdk -b mid.vmdk -F vmdk top.vmdk
qio top.vmdk 'write -P 0x33 6M 1M'
same_reads top.vmdk
libvmdk_same "delta chain: libvmdk" q.raw top.vmdk mid.vmdk base.vmdk
cp q.raw top.raw
# a parent written after its child was made: its CID changed (QEMU's
# read through a stale parent fails)
cp mid.vmdk stale.vmdk
"$QEMU_IMG" create -q -f vmdk -b stale.vmdk -F vmdk child.vmdk
qio stale.vmdk 'write -P 0x34 0 64k'
assert_rc "stale parent CID: qemu-img fails" 1 "$QEMU_IMG" convert -O raw child.vmdk x.raw
assert_rc "stale parent CID: qimg fails" 1 "$QIMG" convert -O raw child.vmdk x.raw
grep -q "parentCID of 'child.vmdk' .* does not match the CID of its parent" "$SCRATCH/.out" ||
    _fail "the CID mismatch is not named"

# ---- hand-built images ----
# 40 MiB of 64 KiB grains (a grain table: 32 MiB), 24 MiB of 4 KiB ones
# (16 MiB): every kind crosses a grain table; QIMG_LONG=1: 72 MiB
kinds=(sparse stream stream-nomarker stream-shuffle cowd sesparse multi chain)
gen=()
for kind in "${kinds[@]}"; do
    hsize=40
    case $kind in cowd | sesparse) hsize=24 ;; esac
    [ -n "${QIMG_LONG:-}" ] && hsize=72
    gen+=("$kind" "h-$kind.vmdk" "$hsize")
done
"${GEN[@]}" many "${gen[@]}" || exit 1 # (one python3 start for all)
for kind in "${kinds[@]}"; do
    raw_qemu h-$kind.vmdk && raw_qimg h-$kind.vmdk
    assert_rc "$kind: qemu-img reads the model" 0 cmp h-$kind.vmdk.raw q.raw
    assert_rc "$kind: qimg reads the model" 0 cmp h-$kind.vmdk.raw m.raw
    same_as_qemu map --output=json h-$kind.vmdk
    same_as_qemu info --output=json --backing-chain h-$kind.vmdk
    same_as_qemu check h-$kind.vmdk
done
libvmdk_same "VMware stream: libvmdk reads the model" h-stream.vmdk.raw h-stream.vmdk

# ---- malformed images: a clear error, never a crash or a hang ----
# (with the ASan/UBSan build too when it is there: check or convert, in
# turn, which read every table; all four with QIMG_LONG=1)
BINARIES=("$QIMG")
[ -x "$REPO_DIR/build-asan/tools/qimg" ] && BINARIES+=("$REPO_DIR/build-asan/tools/qimg")
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1
# class, exit code of convert, a substring of qimg's message
cat >bad.list <<'EOF'
gtes 1 L2 table size too big
granularity 1 Invalid granularity, image may be corrupt
granularity0 1 L1 entry size is invalid
version 1 Unsupported VMDK version 4
gd-beyond 1 grain directory of extent
gd-huge 1 L1 size too big
capacity 1 L1 size too big
truncated 1 File truncated, expecting at least
footer 1 Invalid footer
marker-size 1 Invalid compressed grain
bad-deflate 1 Could not decompress the grain
gte-eof 0 -
gte-huge 0 -
no-cid 1 No valid CID in the descriptor
create-type 1 Unsupported image type 'weird'
extent-line 1 Invalid extent line
extent-missing 1 extent-missing.vmdk-s002.vmdk': No such file or directory
extent-abs 1 extent '/etc/passwd' is an absolute path
extent-dotdot 1 leads out of the image's folder
extent-dev 1 extent '/dev/zero' is an absolute path
extent-json 1 names a protocol
parent-long 1 Could not open backing file
sesparse-magic 1 Bad const header magic
sesparse-dirty 1 Replaying journal not supported
sesparse-gd 1 Invalid grain directory entry 0x2000000000000000
cowd-gd 1 grain directory of extent
desc-nul 1 invalid VMDK image descriptor
EOF
"${GEN[@]}" bad-each bad $(cut -d' ' -f1 bad.list) || exit 1
nbad=0
while read -r cls rc msg; do
    asan_cmd=check
    [ $((nbad++ % 2)) = 0 ] || asan_cmd="convert -O raw"
    for bin in "${BINARIES[@]}"; do for cmd in "convert -O raw" "check" "map --output=json" \
        "info --backing-chain"; do
        [ "$bin" = "$QIMG" ] || [ -n "${QIMG_LONG:-}" ] || [ "$cmd" = "$asan_cmd" ] || continue
        extra=
        [ "$cmd" = "convert -O raw" ] && extra=bad/$cls/out.raw
        # shellcheck disable=SC2086
        timeout 20 "$bin" $cmd bad/$cls/$cls.vmdk $extra >bad/out 2>&1
        got=$?
        _checks=$((_checks + 1))
        case $got in
        124) _fail "$cls: qimg $cmd hangs" ;;
        0 | 1 | 2) ;;
        *) _fail "$cls: qimg $cmd exits $got (a crash?)" ;;
        esac
        # (the output read by the shell, not grep: a process each)
        out=$(<bad/out)
        if [[ "$out" == *"runtime error"* || "$out" == *AddressSanitizer* ||
            "$out" == *LeakSanitizer* ]]; then
            _fail "$cls: $bin $cmd: sanitizer report"
            head -20 bad/out
        fi
        if [ "$cmd" = "convert -O raw" ]; then
            [ "$got" = "$rc" ] || _fail "$cls: convert exits $got, expected $rc"
            if [ "$rc" != 0 ] && [[ "$out" != *"$msg"* ]]; then
                _fail "$cls: '$msg' not in: $out"
            fi
        fi
    done; done
done <bad.list
# a grain table entry past the end: check says so as qemu-img does
same_as_qemu_err check bad/gte-eof/gte-eof.vmdk

# ---- the async API and qimg nbd over a VMDK ----
assert_rc "bench (async reads) on a VMDK" 0 "$QIMG" bench -c 200 -d 8 -s 64k so.vmdk
# (CI has nbdkit and the plugin: there, their absence fails the test)
in_ci && requires nbdkit qimg-nbd-plugin
if command -v nbdkit >/dev/null && [ -e "$QIMG_NBD_PLUGIN" ]; then
    "$QIMG" nbd -r -t -k "$PWD/v.sock" top.vmdk &
    npid=$!
    nbd_ready v.sock $npid || { kill $npid; finish; }
    rm -f nbd.raw
    "$QEMU_IMG" convert -f raw -O raw "nbd+unix:///?socket=$PWD/v.sock" nbd.raw
    same_file "qimg nbd serves the delta chain" top.raw nbd.raw
    stop_server $npid "qimg nbd"
fi

# ---- bounded memory: a 1 TiB sparse image (grain tables cached) ----
"$QEMU_IMG" create -q -f vmdk big.vmdk 1T
qio big.vmdk 'write -P 1 0 1M' 'write -P 2 500G 1M' 'write -P 3 1023G 1M'
rss() { # peak RSS (KiB) of the command (GNU time: no python3 start)
    local l kb=
    /usr/bin/time -f '%M' -o rss.txt "$@" >/dev/null || return 1
    while IFS= read -r l; do kb=$l; done <rss.txt
    echo "$kb"
}
for cmd in "info big.vmdk" "map --output=json big.vmdk" \
    "convert -O qcow2 big.vmdk big.qcow2"; do
    # shellcheck disable=SC2086
    kb=$(rss "$QIMG" $cmd) || _fail "qimg $cmd failed"
    _checks=$((_checks + 1))
    [ "${kb:-999999}" -le 65536 ] || _fail "qimg $cmd: peak RSS $kb KiB > 64 MiB"
done
assert_rc "1 TiB: the copy reads the same" 0 "$QIMG" compare big.vmdk big.qcow2

finish
