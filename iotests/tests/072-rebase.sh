#!/bin/bash
# qimg rebase against qemu-img rebase on copies of the same chains: the
# result's contents (and that they equal the chain's before), qemu-img's
# map without host offsets, the first 4 KiB of the header byte for byte,
# qemu-img check, messages and exit codes:
#  - safe mode onto another backing file (qcow2 and raw, larger and
#    smaller than the image), onto a file deeper in the chain, onto nothing
#    (-b "", flattening), for v3, v2, 4 KiB clusters and extended L2;
#  - -u (header only), with a bitmaps extension and unknown extensions kept,
#    and no backing file opened (a missing one, an unknown format: QEMU
#    114); -p's progress lines with -u;
#  - refusals: no -b, no -F, a bad -F, a missing new backing file, two
#    file names, an image in use;
#  - power loss during a safe rebase and a flattening (the crash-state
#    explorer, backing.c invariant 1): every state reads as before.
. "${0%/*}/../common.sh"
. "$IOTESTS_DIR/crash/lib.sh"
requires qimg qemu-img qemu-io python3

# rebase_both IMG ARGS...: rebase copies q.qcow2 (qemu-img) and m.qcow2
# (qimg) of IMG with ARGS, then compare.
rebase_both() {
    local img=$1
    shift
    cp "$img" q.qcow2
    cp "$img" m.qcow2
    "$QEMU_IMG" rebase "$@" q.qcow2 >q.out 2>q.err
    local qrc=$?
    "$QIMG" rebase "$@" m.qcow2 >m.out 2>m.err
    local mrc=$?
    sed -i -e 's/^qemu-img: /qimg: /' -e "s/'qemu-img --help'/'qimg --help'/" q.err
    assert_eq "rebase $* $img: exit code" "$qrc" "$mrc"
    assert_eq "rebase $* $img: messages" "$(cat q.out q.err)" "$(cat m.out m.err)"
    [ "$qrc" = 0 ] || return 0
    assert_rc "rebase $* $img: contents as qemu-img's" 0 "$QEMU_IMG" compare q.qcow2 m.qcow2
    assert_eq "rebase $* $img: qemu-img's map" "$(map_flags q.qcow2)" "$(map_flags m.qcow2)"
    # (QEMU rewrites the bitmap directory at a read-write open and close,
    # qimg leaves it: the directory offset is not compared)
    assert_rc "rebase $* $img: header" 0 cmp <(header_masked q.qcow2) <(header_masked m.qcow2)
    assert_rc "rebase $* $img: check" 0 "$QEMU_IMG" check -q m.qcow2
}

# The first 4 KiB of IMG with the bitmaps extension's directory offset
# zeroed.
header_masked() {
    python3 - "$1" <<'PY'
import struct, sys
h = bytearray(open(sys.argv[1], "rb").read(4096))
off = struct.unpack(">I", h[100:104])[0] if struct.unpack(">I", h[4:8])[0] >= 3 else 72
while off + 8 <= len(h):
    magic, ln = struct.unpack(">II", h[off:off + 8])
    if magic == 0:
        break
    if magic == 0x23852875:
        h[off + 8 + 16:off + 8 + 24] = bytes(8)
    off += 8 + ((ln + 7) & ~7)
sys.stdout.buffer.write(h)
PY
}

# (make test: v3 64k and 4k clusters; QIMG_LONG=1 adds v2 and extended L2)
configs=("" "cluster_size=4k")
[ -n "${QIMG_LONG:-}" ] && configs=("" "compat=0.10" "cluster_size=4k" "cluster_size=64k,extended_l2=on")
for o in "${configs[@]}"; do
    mk_qcow2 b0.qcow2 10M "$o" 'write -P 7 0 4M'
    mk_qcow2 b1.qcow2 10M "$o,backing_file=b0.qcow2,backing_fmt=qcow2" 'write -P 1 0 2M' \
        'write -P 9 5M 100k' 'write -z 3M 64k'
    mk_qcow2 b2.qcow2 8M "$o" 'write -P 2 1M 2M' 'write -P 9 5M 100k' 'write -P 5 7M 1000'
    head -c 3000000 /dev/urandom >r.raw
    mk_qcow2 t.qcow2 12M "$o,backing_file=b1.qcow2,backing_fmt=qcow2" 'write -P 3 1536k 64k' \
        'write -P 4 9M 64k' 'write -P 6 100k 7k'
    cp t.qcow2 before.qcow2
    all=("-b b2.qcow2 -F qcow2" "-b ''" "-u -b b2.qcow2 -F qcow2")
    [ -z "$o" ] && all+=("-b r.raw -F raw" "-b b0.qcow2 -F qcow2" "-u -b ''"
        "-q -b b2.qcow2 -F qcow2" "-t none -T none -b b2.qcow2 -F qcow2")
    for args in "${all[@]}"; do
        eval "set -- $args"
        rebase_both t.qcow2 "$@"
        # safe mode: the chain reads as before
        [[ "$args" == -u* ]] ||
            assert_rc "rebase $args ($o): reads as before" 0 "$QEMU_IMG" compare m.qcow2 before.qcow2
    done
done

# -u keeps what it does not change: a bitmaps extension, unknown extensions
mk_qcow2 bm.qcow2 10M "" 'write -P 1 0 1M'
"$QEMU_IMG" bitmap --add bm.qcow2 bitmap0
python3 - <<'PY'
import struct
with open("bm.qcow2", "r+b") as f:
    h = bytearray(f.read(4096))
    hl = struct.unpack(">I", h[100:104])[0]
    off = hl
    while True:  # find the end extension, put an unknown one before it
        magic, ln = struct.unpack(">II", h[off:off + 8])
        if magic == 0:
            break
        off += 8 + ((ln + 7) & ~7)
    h[off:off + 24] = struct.pack(">II", 0x12345678, 5) + b"hello\0\0\0" + b"\0" * 8
    f.seek(0)
    f.write(h)
PY
rebase_both bm.qcow2 -u -b b2.qcow2 -F qcow2
assert_eq "bitmap kept" "$("$QEMU_IMG" info bm.qcow2 | grep -A3 bitmaps: | tail -n +2)" \
    "$("$QEMU_IMG" info m.qcow2 | grep -A3 bitmaps: | tail -n +2)"

# -u opens no backing file: the old one gone (KubeVirt CDI's "rebase -p -u
# -F raw -b BASE DELTA"), or of a format no driver has (QEMU 114); -p's
# progress lines (in safe mode qemu-img prints a line per chunk it looks
# at, 100% again and again past the sixth: not compared)
"$QEMU_IMG" create -q -f qcow2 -u -b gone.qcow2 -F qcow2 g.qcow2 12M
rebase_both g.qcow2 -p -u -F raw -b r.raw
"$QEMU_IMG" create -q -f qcow2 -u -b b2.qcow2 -F qcow2 g.qcow2 12M
sed -i 's/\x00\x00\x00\x05qcow2/\x00\x00\x00\x05xyzzy/' g.qcow2 # the backing format
rebase_both g.qcow2 -u -F qcow2 -b b2.qcow2
assert_eq "114: the format replaced" "backing file format: qcow2" \
    "$("$QEMU_IMG" info m.qcow2 | grep 'backing file format')"
same_as_qemu_err rebase -p -b b2.qcow2 -F qcow2 g.qcow2 # safe mode opens it: refused

# refusals
rebase_both t.qcow2
rebase_both t.qcow2 -b b2.qcow2
rebase_both t.qcow2 -b b2.qcow2 -F nosuchfmt
rebase_both t.qcow2 -b nosuch.qcow2 -F qcow2
rebase_both t.qcow2 -u -b b2.qcow2
expect_error "two file names" rebase -b b2.qcow2 -F qcow2 t.qcow2 t.qcow2
hold_image t.qcow2
holder=$HOLDER
trap 'kill $holder 2>/dev/null; _cleanup' EXIT
expect_error "image in use" rebase -u -b b2.qcow2 -F qcow2 t.qcow2
kill $holder

# power loss: the recording node under the image, states judged with the
# backing files next to them
d=$SCRATCH/crash
mkdir -p "$d"
(
    cd "$d" || exit 1
    mk_qcow2 b1.qcow2 4M "" 'write -P 1 0 1M' 'write -P 9 2M 100k'
    mk_qcow2 b2.qcow2 4M "" 'write -P 2 512k 1M' 'write -P 9 2M 100k'
    mk_qcow2 img.qcow2 4M "backing_file=b1.qcow2,backing_fmt=qcow2" 'write -P 3 700k 64k'
    "$QEMU_IMG" convert -O raw img.qcow2 A0.raw
)
cp "$d/img.qcow2" "$d/img0.qcow2"
crash_op rebase "$d" --expect-raw "$d/A0.raw" --link "b1.qcow2=$d/b1.qcow2" \
    --link "b2.qcow2=$d/b2.qcow2" -- rebase -b b2.qcow2 -F qcow2 @IMG@
cp "$d/img0.qcow2" "$d/img.qcow2"
crash_op rebase-flatten "$d" --expect-raw "$d/A0.raw" --link "b1.qcow2=$d/b1.qcow2" \
    -- rebase -b "" @IMG@
crash_summary

finish
