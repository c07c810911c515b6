#!/bin/bash
# json:{...} backing file names read from an image (api/json-name.c
# invariant 1, block.h invariant 5) against qemu-img and qemu-io on the
# same images: info (human, JSON, --backing-chain), map, compare, convert
# and reads through qimg io over a chain whose backing name is a json:
# name (absolute and relative file.filename -- relative to the working
# directory, as QEMU; nested format and file, runtime options, the image's
# backing format winning over the name's driver), and the refusals: a
# protocol other than the file (blkdebug, nbd, null-co, ...) is refused
# by qimg, naming the driver, where QEMU opens it.
. "$(dirname "$0")/../common.sh"
requires qimg qemu-img qemu-io

# io_both DESC DIR IMG CMD: qemu-io and qimg io -c CMD on IMG in DIR must
# print the same (timing lines left out) and exit alike.
io_both() {
    local desc=$1 dir=$2 img=$3 cmd=$4 qrc mrc
    (cd "$dir" && "$QEMU_IO" -c "$cmd" "$img" >"$SCRATCH/q.out" 2>&1)
    qrc=$?
    (cd "$dir" && "$QIMG" io -c "$cmd" "$img" >"$SCRATCH/m.out" 2>&1)
    mrc=$?
    sed -i -e 's/^qemu-io: /qimg: /' -e '/ops; /d' "$SCRATCH/q.out"
    sed -i '/ops; /d' "$SCRATCH/m.out"
    assert_eq "$desc: qemu-io and qimg io" "$(cat "$SCRATCH/q.out") rc=$qrc" \
        "$(cat "$SCRATCH/m.out") rc=$mrc"
}

mkdir -p sub
qi create -f qcow2 sub/base.qcow2 4M
qio sub/base.qcow2 'write -P 0x11 0 1M' 'write -z 3M 64k'
qi create -f qcow2 -b base.qcow2 -F qcow2 sub/top.qcow2 4M
qio sub/top.qcow2 'write -P 0x22 512k 128k'
A=$SCRATCH/sub/base.qcow2

# ---- names that open the plain file ----
n=0
for J in \
    "json:{\"driver\":\"qcow2\",\"file\":{\"driver\":\"file\",\"filename\":\"$A\"}}" \
    'json:{"driver":"qcow2","file":{"driver":"file","filename":"sub/base.qcow2"}}' \
    'json:{"driver":"qcow2","file":{"filename":"sub/base.qcow2"}}' \
    'json:{"driver":"qcow2","file.driver":"file","file.filename":"sub/base.qcow2"}' \
    'json:{"file":{"driver":"file","filename":"sub/base.qcow2"}}' \
    'json:{"driver":"raw","file":{"driver":"file","filename":"sub/base.qcow2"}}' \
    'json:{"driver":"qcow2","cache-size":"1048576","cache":{"direct":true},"file":{"driver":"file","filename":"sub/base.qcow2"}}' \
    'json:{"driver":"qcow2","backing":null,"read-only":"on","file":{"driver":"file","filename":"sub/base.qcow2","cache.no-flush":"on"}}'; do
    n=$((n + 1))
    cp sub/top.qcow2 sub/t$n.qcow2
    qi rebase -u -b "$J" -F qcow2 sub/t$n.qcow2
    same_as_qemu_err info sub/t$n.qcow2
    same_as_qemu_err info --output=json sub/t$n.qcow2
    same_as_qemu_err info --backing-chain sub/t$n.qcow2
    same_as_qemu_err info --backing-chain --output=json sub/t$n.qcow2
    same_as_qemu_err map sub/t$n.qcow2
    same_as_qemu_err map --output=json sub/t$n.qcow2
    same_as_qemu_err compare sub/t$n.qcow2 sub/top.qcow2
    io_both "name $n" . sub/t$n.qcow2 'read -P 0x11 0 512k'
    io_both "name $n, top data" . sub/t$n.qcow2 'read -P 0x22 512k 128k'
    # relative to the working directory, not the image's: from sub/ the
    # relative names are missing, the absolute one is found
    (cd sub && same_as_qemu_err info --backing-chain t$n.qcow2)
    (cd sub && same_as_qemu_err map t$n.qcow2)
    io_both "name $n, from sub/" sub t$n.qcow2 'read 0 512'
    rm -f q.qcow2 m.qcow2
    "$QEMU_IMG" convert -O qcow2 sub/t$n.qcow2 q.qcow2
    "$QIMG" convert -O qcow2 sub/t$n.qcow2 m.qcow2
    assert_rc "name $n: convert" 0 "$QEMU_IMG" compare -q q.qcow2 m.qcow2
    assert_rc "name $n: convert, qcow2 check" 0 "$QEMU_IMG" check -q m.qcow2
done
# The image's backing format wins over the name's driver (qcow2 read as
# raw: the base's header, not its data).
cp sub/top.qcow2 sub/fmt.qcow2
qi rebase -u -b 'json:{"driver":"qcow2","file":{"driver":"file","filename":"sub/base.qcow2"}}' \
    -F raw sub/fmt.qcow2
same_as_qemu_err info --backing-chain --output=json sub/fmt.qcow2
same_as_qemu_err map --output=json sub/fmt.qcow2
io_both "format raw over a qcow2 name" . sub/fmt.qcow2 'read -P 0x11 0 512'
same_as_qemu_err compare sub/fmt.qcow2 sub/top.qcow2

# ---- names that QEMU refuses too: the same words ----
for J in \
    'json:{"driver":"qcow2","file":"node0"}' \
    'json:{"driver":"qcow2","filename":"sub/base.qcow2"}' \
    'json:{"driver":"file","filename":"sub/base.qcow2"}' \
    'json:{"driver":"qcow2","bogus":1,"file":{"driver":"file","filename":"sub/base.qcow2"}}' \
    'json:{"driver":"qcow2","file":{"driver":"file","filename":"nosuch.qcow2"}}' \
    'json:{"driver":"qcow2","file":{"driver":"file","filename":"blkdebug::sub/base.qcow2"}}' \
    'json:["sub/base.qcow2"]'; do
    cp sub/top.qcow2 sub/bad.qcow2
    qi rebase -u -b "$J" -F qcow2 sub/bad.qcow2
    same_as_qemu_err info sub/bad.qcow2
    same_as_qemu_err info --backing-chain sub/bad.qcow2
    same_as_qemu_err map sub/bad.qcow2
    io_both "refused by both: $J" . sub/bad.qcow2 'read 0 512'
done

# ---- another protocol: QEMU opens it, qimg refuses, naming the driver ----
# (what QEMU does is checked too, so that the case stays one where a name
# from an image would reach another protocol)
refuse() { # DRIVER JSON QEMU-RC
    cp sub/top.qcow2 sub/p.qcow2
    qi rebase -u -b "$2" -F qcow2 sub/p.qcow2
    "$QEMU_IO" -c 'read 0 512' sub/p.qcow2 >q.out 2>&1
    assert_eq "qemu-io over a $1 backing name: exit code" "$3" "$?"
    for cmd in "io -c read\ 0\ 512" "map" "info --backing-chain" "compare"; do
        case $cmd in
        io*) "$QIMG" io -c 'read 0 512' sub/p.qcow2 >m.out 2>&1 ;;
        compare) "$QIMG" compare sub/p.qcow2 sub/top.qcow2 >m.out 2>&1 ;;
        *) "$QIMG" $cmd sub/p.qcow2 >m.out 2>&1 ;;
        esac
        rc=$?
        [ "$cmd" = compare ] || [ $rc = 1 ] || _fail "qimg $cmd over $1: exit code $rc"
        [ "$cmd" != compare ] || [ $rc = 2 ] || _fail "qimg compare over $1: exit code $rc"
        assert_eq "qimg $cmd over a $1 backing name refuses it" 1 \
            "$(grep -c "qimg opens a backing file named by an image only as a plain file: driver '$1' refused" m.out)"
    done
}
refuse blkdebug "json:{\"driver\":\"qcow2\",\"file\":{\"driver\":\"blkdebug\",\"image\":{\"driver\":\"file\",\"filename\":\"$A\"}}}" 0
refuse null-co 'json:{"driver":"qcow2","file":{"driver":"null-co"}}' 1
refuse nbd 'json:{"driver":"qcow2","file":{"driver":"nbd","server":{"type":"unix","path":"/nonexistent.sock"}}}' 1
refuse nvme 'json:{"driver":"qcow2","file":{"driver":"nvme","device":"0000:00:00.0","namespace":1}}' 1
# with no backing format in the image, the name's format driver decides
cp sub/top.qcow2 sub/p.qcow2
qi rebase -u -b "json:{\"driver\":\"blkdebug\",\"image\":{\"driver\":\"file\",\"filename\":\"$A\"}}" -F qcow2 sub/p.qcow2
same_as_qemu_err map sub/p.qcow2 # the image's format wins: qcow2 needs "file"
python3 - sub/p.qcow2 <<'PY'
import struct, sys
# drop the backing format header extension (type 0xe2792aca): the name's
# driver decides
with open(sys.argv[1], 'r+b') as f:
    f.seek(100)
    hlen = struct.unpack('>I', f.read(4))[0]
    off = hlen
    while True:
        f.seek(off)
        t, l = struct.unpack('>II', f.read(8))
        if t == 0:
            break
        if t == 0xe2792aca:
            f.seek(off)
            f.write(struct.pack('>II', 0x12345678, l)) # an unknown extension
        off += 8 + (l + 7) // 8 * 8
PY
"$QIMG" map sub/p.qcow2 >m.out 2>&1
assert_eq "a blkdebug format driver in a name without backing format" \
    "qimg: Could not open 'sub/p.qcow2': Could not open backing file: qimg opens a backing file named by an image only as a plain file: driver 'blkdebug' refused" \
    "$(cat m.out)"

# ---- a plain backing name with a test-node prefix: qemu-img opens it
# as blkdebug (info --backing-chain, map); qimg opens only the file named
# so (relative to the image's folder, as any plain name), and there is none
cp sub/top.qcow2 sub/pl.qcow2
qi rebase -u -b "blkdebug::$A" -F qcow2 sub/pl.qcow2
assert_rc "qemu-img map over a blkdebug: backing name" 0 "$QEMU_IMG" map sub/pl.qcow2
P="sub/blkdebug::$A"
"$QIMG" info --backing-chain sub/pl.qcow2 >m.out 2>&1
assert_eq "info --backing-chain over a blkdebug: backing name" \
    "qimg: Could not open '$P': Could not open '$P': No such file or directory" \
    "$(cat m.out)"
"$QIMG" map sub/pl.qcow2 >m.out 2>&1
assert_eq "map over a blkdebug: backing name" \
    "qimg: Could not open 'sub/pl.qcow2': Could not open backing file: Could not open '$P': No such file or directory" \
    "$(cat m.out)"

finish
