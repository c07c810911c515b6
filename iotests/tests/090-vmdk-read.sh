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
. "$(dirname "$0")/../common.sh"
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

# the SHA-256 of a (sparse) file, holes hashed as zeros without reading
# them (sha256sum read and hashed 3 GiB per image: most of this test's time)
sparse_sha() {
    python3 - "$1" <<'PY'
import hashlib, os, sys
fd, m = os.open(sys.argv[1], os.O_RDONLY), hashlib.sha256()
end, pos, zero = os.fstat(fd).st_size, 0, bytes(1 << 20)
while pos < end:
    try:
        data = os.lseek(fd, pos, os.SEEK_DATA)
    except OSError:
        data = end
    while pos < data:  # a hole
        n = min(len(zero), data - pos)
        m.update(zero[:n])
        pos += n
    hole = os.lseek(fd, pos, os.SEEK_HOLE) if pos < end else end
    while pos < hole:
        b = os.pread(fd, min(1 << 20, hole - pos), pos)
        m.update(b)
        pos += len(b)
print(m.hexdigest())
PY
}
sha_qimg() { "$QIMG" convert -O raw "$1" out.raw && sparse_sha out.raw; }
sha_qemu() { "$QEMU_IMG" convert -O raw "$1" qout.raw && sparse_sha qout.raw; }
sha_libvmdk() {
    "$PYVMDK" - "$@" <<'EOF'
import hashlib, os, sys
import pyvmdk
chain = sys.argv[1:]            # the image, then its parents
handles = []
for name in reversed(chain):
    h = pyvmdk.handle()
    h.open(name)
    h.open_extent_data_files()
    if handles:
        h.set_parent(handles[-1])
    handles.append(h)
h = handles[-1]
n, off, m = h.get_media_size(), 0, hashlib.sha256()
while off < n:
    b = h.read_buffer_at_offset(min(1 << 20, n - off), off)
    m.update(b)
    off += len(b)
print(m.hexdigest())
EOF
}

# vmdkinfo (libvmdk's tool) sees qimg info's size, CIDs and extent count
vmdkinfo_of() {
    local v j
    v=$(vmdkinfo "$1" 2>&1)
    j=$("$QIMG" info --output=json "$1" | python3 -c 'import json, sys
i = json.load(sys.stdin)
d = i["format-specific"]["data"]
print(i["virtual-size"], "0x%08x" % d["cid"], "0x%08x" % d["parent-cid"], len(d["extents"]))')
    assert_eq "$1: vmdkinfo" "$j" "$(printf '%s\n' "$v" | python3 -c 'import re, sys
t = sys.stdin.read()
def f(k): return re.search(k + r":\s*(.*)", t).group(1).strip()
size = re.search(r"\((\d+) bytes\)", f("Media size")).group(1)
print(size, f("Content identifier"), f("Parent content identifier"), f("Number of extents"))')"
}

# the same answers as qemu-img, for every read-only command
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
    assert_eq "$img: convert -O raw" "$(sha_qemu "$img")" "$(sha_qimg "$img")"
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
    assert_eq "$sf: libvmdk reads what qemu-img reads" "$(sha_qemu $sf.vmdk)" \
        "$(sha_libvmdk $sf.vmdk)"
    vmdkinfo_of $sf.vmdk
done
"$QEMU_IMG" create -q -f vmdk -o zeroed_grain=on zg.vmdk 256M
qio zg.vmdk 'write -P 0x21 0 4M' 'write -z 1M 1M' 'write -z 100M 64k' 'write -P 1 255M 1M'
same_reads zg.vmdk # (libvmdk 20200926 reads a zeroed grain entry as sector 1)
head -c 20M /dev/urandom >r.raw
head -c 20M /dev/zero >>r.raw
"$QEMU_IMG" convert -O vmdk -o subformat=streamOptimized r.raw so.vmdk
same_reads so.vmdk
assert_eq "streamOptimized: libvmdk" "$(sha_qemu so.vmdk)" "$(sha_libvmdk so.vmdk)"
vmdkinfo_of so.vmdk
assert_eq "streamOptimized: the source" "$(sha256sum <r.raw | cut -c1-64)" "$(sha_qimg so.vmdk)"

# delta disks qemu-img creates (backing_file): a chain of three
"$QEMU_IMG" create -q -f vmdk base.vmdk 64M
qio base.vmdk 'write -P 0x31 0 8M'
"$QEMU_IMG" create -q -f vmdk -b base.vmdk -F vmdk mid.vmdk
qio mid.vmdk 'write -P 0x32 4M 8M'
"$QEMU_IMG" create -q -f vmdk -b mid.vmdk -F vmdk top.vmdk
qio top.vmdk 'write -P 0x33 6M 1M'
same_reads top.vmdk
assert_eq "delta chain: libvmdk" "$(sha_qemu top.vmdk)" \
    "$(sha_libvmdk top.vmdk mid.vmdk base.vmdk)"
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
for kind in sparse stream stream-nomarker cowd sesparse multi chain; do
    "${GEN[@]}" $kind h-$kind.vmdk 72 || exit 1
    want=$(sha256sum <h-$kind.vmdk.raw | cut -c1-64)
    assert_eq "$kind: qemu-img reads the model" "$want" "$(sha_qemu h-$kind.vmdk)"
    assert_eq "$kind: qimg reads the model" "$want" "$(sha_qimg h-$kind.vmdk)"
    same_as_qemu map --output=json h-$kind.vmdk
    same_as_qemu info --output=json --backing-chain h-$kind.vmdk
    same_as_qemu check h-$kind.vmdk
done
assert_eq "VMware stream: libvmdk reads the model" \
    "$(sha256sum <h-stream.vmdk.raw | cut -c1-64)" "$(sha_libvmdk h-stream.vmdk)"

# ---- malformed images: a clear error, never a crash or a hang ----
# (with the ASan/UBSan build too when it is there)
BINARIES=("$QIMG")
[ -x "$REPO_DIR/build-asan/tools/qimg" ] && BINARIES+=("$REPO_DIR/build-asan/tools/qimg")
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1
# class, exit code of convert, a substring of qimg's message
while read -r cls rc msg; do
    rm -rf bad && mkdir bad
    "${GEN[@]}" bad bad/$cls.vmdk "$cls" || exit 1
    for bin in "${BINARIES[@]}"; do for cmd in "convert -O raw" "map --output=json" "check" \
        "info --backing-chain"; do
        extra=
        [ "$cmd" = "convert -O raw" ] && extra=bad/out.raw
        # shellcheck disable=SC2086
        timeout 20 "$bin" $cmd bad/$cls.vmdk $extra >bad/out 2>&1
        got=$?
        _checks=$((_checks + 1))
        case $got in
        124) _fail "$cls: qimg $cmd hangs" ;;
        0 | 1 | 2) ;;
        *) _fail "$cls: qimg $cmd exits $got (a crash?)" ;;
        esac
        if grep -q 'runtime error\|AddressSanitizer\|LeakSanitizer' bad/out; then
            _fail "$cls: $bin $cmd: sanitizer report"
            head -20 bad/out
        fi
        if [ "$cmd" = "convert -O raw" ]; then
            [ "$got" = "$rc" ] || _fail "$cls: convert exits $got, expected $rc"
            if [ "$rc" != 0 ] && ! grep -qF -- "$msg" bad/out; then
                _fail "$cls: '$msg' not in: $(cat bad/out)"
            fi
        fi
    done; done
done <<'EOF'
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
# a grain table entry past the end: check says so as qemu-img does
"${GEN[@]}" bad eof.vmdk gte-eof || exit 1
same_as_qemu_err check eof.vmdk

# ---- the async API and qimg nbd over a VMDK ----
assert_rc "bench (async reads) on a VMDK" 0 "$QIMG" bench -c 200 -d 8 -s 64k so.vmdk
if command -v nbdkit >/dev/null && [ -e "$QIMG_NBD_PLUGIN" ]; then
    "$QIMG" nbd -r -t -k "$PWD/v.sock" top.vmdk &
    npid=$!
    for _ in $(seq 100); do [ -S v.sock ] && break; sleep 0.05; done
    rm -f nbd.raw
    "$QEMU_IMG" convert -f raw -O raw "nbd+unix:///?socket=$PWD/v.sock" nbd.raw
    assert_eq "qimg nbd serves the delta chain" "$(sha_qemu top.vmdk)" \
        "$(sha256sum <nbd.raw | cut -c1-64)"
    kill $npid
    wait $npid 2>/dev/null
fi

# ---- bounded memory: a 1 TiB sparse image (grain tables cached) ----
"$QEMU_IMG" create -q -f vmdk big.vmdk 1T
qio big.vmdk 'write -P 1 0 1M' 'write -P 2 500G 1M' 'write -P 3 1023G 1M'
rss() { # peak RSS (KiB) of the command
    python3 -c 'import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$@"
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
