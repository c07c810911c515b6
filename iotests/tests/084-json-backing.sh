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
# The caller's "backing" and "data-file" options (json: and --image-opts,
# json-name.c invariant 4) open the layer they name instead of the image's;
# node names, a missing file, a format mismatch, a data file for an image
# without one, backing options where qemu-img info refuses them.
# Then the dirty-image repair (qcow2.c invariant 8): a read-write open of a
# dirty image (lazy refcounts and a kill -9, or the dirty bit set on an
# image with leaks, or on a clean one) prints what QEMU prints on standard
# error while it repairs -- nothing for a read-only open, a clean image, or
# qemu-img commit's base (QEMU's reopen) -- and leaves the image clean.
# make test runs, for every name, what shows it or reads through it (info
# and map of the chain, qemu-io reads), the rest over two of the names;
# of the caller's options, map and reads for every one, the other commands
# where the name opens; the repair of leaks and of the dirty bit alone
# under four of the commands.  QIMG_LONG=1 runs every command over every
# name and image.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

# io_both DESC DIR IMG CMD: qemu-io and qimg io -c CMD on IMG in DIR must
# print the same (timing lines left out) and exit alike.
# (cd and back rather than subshells, the outputs filtered by the shell's
# builtins (common.sh filter_lines): a process costs ~8 ms of CPU)
io_both() {
    local desc=$1 dir=$2 img=$3 cmd=$4 qrc mrc qo mo
    cd "$dir" || exit 1
    "$QEMU_IO" -c "$cmd" "$img" >"$SCRATCH/q.out" 2>&1
    qrc=$?
    "$QIMG" io -c "$cmd" "$img" >"$SCRATCH/m.out" 2>&1
    mrc=$?
    cd "$SCRATCH" || exit 1
    lines q.out _io_q_line qo
    lines m.out _m_line mo
    assert_eq "$desc: qemu-io and qimg io" "$qo rc=$qrc" "$mo rc=$mrc"
}
# lines FILE EDIT VAR: VAR = FILE's lines through EDIT (filter_lines), or
# through sed where filter_lines leaves them to it
lines() {
    filter_lines "$3" "$1" "$2" && return
    local sed_args
    case $2 in
    _io_q_line) sed_args=(-e 's/^qemu-io: /qimg: /' -e '/ops; /d') ;;
    _q_line) sed_args=(-e 's/^qemu-io: /qimg: /' -e 's/^qemu-img: /qimg: /' -e 's/q\.qcow2/m.qcow2/g' -e '/ops; /d') ;;
    _m_line) sed_args=(-e '/ops; /d') ;;
    esac
    printf -v "$3" '%s' "$(sed "${sed_args[@]}" "$1")"
}
# (the sed edits in lines above, line by line)
_q_line() {
    case $_l in
    "qemu-io: "*) _l="qimg: ${_l#qemu-io: }" ;;
    "qemu-img: "*) _l="qimg: ${_l#qemu-img: }" ;;
    esac
    _l=${_l//q.qcow2/m.qcow2}
    [[ "$_l" != *"ops; "* ]] || _drop=1
}
_m_line() { [[ "$_l" != *"ops; "* ]] || _drop=1; }
_io_q_line() {
    [[ "$_l" != "qemu-io: "* ]] || _l="qimg: ${_l#qemu-io: }"
    _m_line
}
# count VAR FILE TEXT: VAR = how many lines of FILE hold TEXT (grep -c -F)
count() {
    local _c=0 _x
    while IFS= read -r _x || [ -n "$_x" ]; do
        [[ "$_x" != *"$3"* ]] || _c=$((_c + 1))
    done <"$2"
    printf -v "$1" '%s' $_c
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
    # what shows the name (or the one QEMU rebuilds from its options: the
    # chain, the human map's file column) and reads through it, for every
    # name
    same_as_qemu_err info --backing-chain sub/t$n.qcow2
    same_as_qemu_err info --backing-chain --output=json sub/t$n.qcow2
    same_as_qemu_err map sub/t$n.qcow2
    io_both "name $n" . sub/t$n.qcow2 'read -P 0x11 0 512k'
    # relative to the working directory, not the image's: from sub/ the
    # relative names are missing, the absolute one is found
    (cd sub && same_as_qemu_err info --backing-chain t$n.qcow2)
    io_both "name $n, from sub/" sub t$n.qcow2 'read 0 512'
    # the other commands over the absolute and the first relative name
    # (QIMG_LONG=1: over every name)
    [ $n -le 2 ] || [ -n "${QIMG_LONG:-}" ] || continue
    same_as_qemu_err info sub/t$n.qcow2
    same_as_qemu_err info --output=json sub/t$n.qcow2
    same_as_qemu_err map --output=json sub/t$n.qcow2
    same_as_qemu_err compare sub/t$n.qcow2 sub/top.qcow2
    io_both "name $n, top data" . sub/t$n.qcow2 'read -P 0x22 512k 128k'
    (cd sub && same_as_qemu_err map t$n.qcow2)
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
        count n m.out "qimg opens a backing file named by an image only as a plain file: driver '$1' refused"
        assert_eq "qimg $cmd over a $1 backing name refuses it" 1 "$n"
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
    "$(<m.out)"

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
    "$(<m.out)"
"$QIMG" map sub/pl.qcow2 >m.out 2>&1
assert_eq "map over a blkdebug: backing name" \
    "qimg: Could not open 'sub/pl.qcow2': Could not open backing file: Could not open '$P': No such file or directory" \
    "$(<m.out)"

# ---- backing and data-file options in the caller's name ----
mkdir -p opt
qi create -f qcow2 opt/b1.qcow2 4M
qio opt/b1.qcow2 'write -P 1 0 64k'
qi create -f qcow2 opt/b2.qcow2 4M
qio opt/b2.qcow2 'write -P 2 0 64k' 'write -P 3 1M 64k'
qi create -f qcow2 -b b1.qcow2 -F qcow2 opt/t.qcow2
qio opt/t.qcow2 'write -P 4 2M 64k'
qi create -f raw opt/r.raw 4M
# (in the working directory: QEMU 7.2 opens a relative data file name
# relative to it, qimg relative to the image's folder; there both agree)
qi create -f qcow2 -o data_file=d1.raw df.qcow2 4M
qio df.qcow2 'write -P 5 0 64k'
cp d1.raw d2.raw
"$QEMU_IO" -f raw -c 'write -P 6 0 64k' d2.raw >/dev/null
T='"driver":"qcow2","file":{"driver":"file","filename":"opt/t.qcow2"}'
B2='"driver":"qcow2","file":{"driver":"file","filename":"opt/b2.qcow2"}'
DF='"driver":"qcow2","file":{"driver":"file","filename":"df.qcow2"}'
for name in \
    "json:{$T,\"backing\":{$B2}}" \
    "json:{$T,\"backing\":{\"file\":{\"driver\":\"file\",\"filename\":\"opt/b2.qcow2\"}}}" \
    "json:{$T,\"backing.file.filename\":\"opt/b2.qcow2\"}" \
    "json:{$T,\"backing\":{\"driver\":\"raw\",\"file\":{\"driver\":\"file\",\"filename\":\"opt/b2.qcow2\"}}}" \
    "json:{$T,\"backing\":{$B2,\"cache\":{\"direct\":true},\"backing\":null}}" \
    "json:{\"driver\":\"qcow2\",\"file\":{\"driver\":\"file\",\"filename\":\"opt/b1.qcow2\"},\"backing\":{$B2}}" \
    "json:{$T,\"backing\":{\"driver\":\"qcow2\",\"file\":{\"driver\":\"file\",\"filename\":\"nosuch.qcow2\"}}}" \
    "json:{$T,\"backing\":{$B2,\"bogus\":1}}" \
    "json:{$T,\"backing\":\"node0\"}" \
    "json:{\"driver\":\"raw\",\"file\":{\"driver\":\"file\",\"filename\":\"opt/r.raw\"},\"backing\":{$B2}}" \
    "json:{$DF,\"data-file\":{\"driver\":\"file\",\"filename\":\"d2.raw\"}}" \
    "json:{$DF,\"data-file\":{\"driver\":\"raw\",\"file\":{\"driver\":\"file\",\"filename\":\"d2.raw\"}}}" \
    "json:{$DF,\"data-file.filename\":\"d2.raw\"}" \
    "json:{$DF,\"data-file\":{\"driver\":\"file\",\"filename\":\"nosuch.raw\"}}" \
    "json:{$DF,\"data-file\":\"node0\"}" \
    "json:{$T,\"data-file\":{\"driver\":\"file\",\"filename\":\"d2.raw\"}}" \
    "json:{$T,\"data-file\":{\"driver\":\"file\",\"filename\":\"nosuch.raw\"}}"; do
    same_as_qemu_err map "$name"
    io_both "$name" . "$name" 'read -P 2 0 64k'
    # a name qemu-img cannot open: the other commands fail in the same
    # open (QIMG_LONG=1 runs them too)
    [ "$Q_RC" = 0 ] || [ -n "${QIMG_LONG:-}" ] || continue
    same_as_qemu_err map --output=json "$name"
    same_as_qemu_err compare "$name" opt/b2.qcow2
    rm -f q.qcow2 m.qcow2
    "$QEMU_IMG" convert -O qcow2 "$name" q.qcow2 >/dev/null 2>&1
    qrc=$?
    "$QIMG" convert -O qcow2 "$name" m.qcow2 >/dev/null 2>&1
    assert_eq "convert $name: exit code" $qrc $?
    [ $qrc != 0 ] || assert_rc "convert $name: contents" 0 "$QEMU_IMG" compare -q q.qcow2 m.qcow2
done
# qemu-img info opens without the backing chain: backing options refused
for name in "json:{$T,\"backing\":{$B2}}" \
    "json:{$T,\"backing\":{\"file\":{\"driver\":\"file\",\"filename\":\"opt/b2.qcow2\"}}}" \
    "json:{$T,\"backing\":\"node0\"}"; do
    same_as_qemu_err info "$name"
done
O=driver=qcow2,file.filename=opt/t.qcow2
same_as_qemu_err map --image-opts $O,backing.file.filename=opt/b2.qcow2
same_as_qemu_err map --image-opts $O,backing.driver=raw,backing.file.filename=opt/b2.qcow2
same_as_qemu_err map --image-opts $O,backing=node0
same_as_qemu_err info --image-opts $O,backing.file.filename=opt/b2.qcow2
same_as_qemu_err compare --image-opts $O,backing.file.filename=opt/b2.qcow2 \
    driver=qcow2,file.filename=opt/b2.qcow2
same_as_qemu_err map --image-opts driver=qcow2,file.filename=df.qcow2,data-file.filename=d2.raw
same_as_qemu_err map --image-opts driver=qcow2,file.filename=opt/t.qcow2,data-file.filename=d2.raw
# the named layers are what is read
"$QIMG" io -c 'read -P 3 1M 64k' -c 'read -P 4 2M 64k' "json:{$T,\"backing\":{$B2}}" >m.out 2>&1
assert_eq "the backing option's data" 0 "$(grep -c 'failed\|rror' m.out)"
"$QIMG" io -c 'read -P 6 0 64k' "json:{$DF,\"data-file\":{\"driver\":\"file\",\"filename\":\"d2.raw\"}}" >m.out 2>&1
assert_eq "the data-file option's data" 0 "$(grep -c 'failed\|rror' m.out)"
# qimg's own refusals: a protocol qimg does not have (http) for a layer,
# nested layers
"$QIMG" map "json:{$T,\"backing\":{\"driver\":\"qcow2\",\"file\":{\"driver\":\"http\",\"url\":\"http://h/x\"}}}" >m.out 2>&1
assert_eq "backing option over http" "qimg: Could not open 'json:{$T,\"backing\":{\"driver\":\"qcow2\",\"file\":{\"driver\":\"http\",\"url\":\"http://h/x\"}}}': Could not open backing file: qimg opens images only through the file protocol (file.driver 'http')" "$(<m.out)"
# a blkdebug data file without its image: QEMU's message (iotest 167 has
# the node with one)
same_as_qemu_err map "json:{$DF,\"data-file\":{\"driver\":\"blkdebug\"}}"

# the data file bit with no name in the image (QEMU's 244; qcow2.c
# invariant 4): info shows it, a full open needs the caller's data-file
# option, and with one reads through it
qi create -f qcow2 -o data_file=nn.data nn.qcow2 1M
qio nn.qcow2 'write -P 0x44 0 64k'
qi amend -o data_file= nn.qcow2
same_as_qemu_err info nn.qcow2
same_as_qemu_err info --output=json nn.qcow2
same_as_qemu_err check nn.qcow2
io_both "no data file name, none given" . nn.qcow2 'read -P 0x44 0 64k'
io_both "no data file name, open -o data-file.filename" . nn.qcow2 \
    'open -o data-file.filename=nn.data nn.qcow2'
same_as_qemu_err map --image-opts driver=qcow2,file.filename=nn.qcow2,data-file.filename=nn.data
"$QIMG" io -c 'read -P 0x44 0 64k' --image-opts \
    driver=qcow2,file.filename=nn.qcow2,data-file.filename=nn.data >m.out 2>&1
assert_eq "no data file name: the option's data" 0 "$(grep -c 'failed\|rror' m.out)"

# ---- dirty images: the repair's lines ----
# leak.py IMG N: give N clusters past the end a reference count of 1 (leaks)
# and set the dirty bit (incompatible bit 0)
cat >leak.py <<'PY'
import struct, sys
img, n = sys.argv[1], int(sys.argv[2])
with open(img, 'r+b') as f:
    f.seek(20); cs = 1 << struct.unpack('>I', f.read(4))[0]
    f.seek(48); rt = struct.unpack('>Q', f.read(8))[0]
    f.seek(96); assert struct.unpack('>I', f.read(4))[0] == 4  # 16-bit refcounts
    f.seek(rt); rb = struct.unpack('>Q', f.read(8))[0]
    f.seek(0, 2); first = (f.tell() + cs - 1) // cs
    for i in range(first, first + n):
        f.seek(rb + 2 * i); f.write(struct.pack('>H', 1))
    f.truncate((first + n) * cs)
    f.seek(72); v = struct.unpack('>Q', f.read(8))[0] | 1
    f.seek(72); f.write(struct.pack('>Q', v))
PY
qi create -f qcow2 -o lazy_refcounts=on killed.qcow2 4M
{ "$QEMU_IO" -c 'write -P 7 0 256k' -c 'sigraise 9' killed.qcow2 >/dev/null; } 2>/dev/null
qi create -f qcow2 leaky.qcow2 4M
qio leaky.qcow2 'write -P 8 0 128k'
python3 leak.py leaky.qcow2 3
qi create -f qcow2 clean.qcow2 4M
qio clean.qcow2 'write -P 9 0 64k'
python3 leak.py clean.qcow2 0
for img in killed leaky clean; do
    assert_eq "$img.qcow2 is dirty" '"dirty-flag": true' \
        "$("$QEMU_IMG" info --output=json $img.qcow2 | grep -o '"dirty-flag": true')"
done
assert_rc "killed.qcow2 has errors" 2 "$QEMU_IMG" check killed.qcow2
assert_rc "leaky.qcow2 has leaks" 3 "$QEMU_IMG" check leaky.qcow2

# dirty_both DESC IMG WRITES CMD...: CMD (with @ for the image) through
# qemu-io/qemu-img and through qimg, each on its own copy of IMG: the same
# stdout, stderr and exit code; WRITES=1: both copies end clean
# (qemu-img check), 0: both are still dirty.
dirty_both() {
    local desc=$1 img=$2 writes=$3 qrc mrc qargs=() margs=() a
    shift 3
    cp "$img" q.qcow2
    cp "$img" m.qcow2
    for a in "$@"; do
        qargs+=("${a//@/q.qcow2}")
        margs+=("${a//@/m.qcow2}")
    done
    case $1 in
    io) "$QEMU_IO" "${qargs[@]:1}" >q.out 2>q.err ;;
    *) "$QEMU_IMG" "${qargs[@]}" >q.out 2>q.err ;;
    esac
    qrc=$?
    "$QIMG" "${margs[@]}" >m.out 2>m.err
    mrc=$?
    local qo qe mo me
    lines q.out _q_line qo
    lines q.err _q_line qe
    lines m.out _m_line mo
    me=$(<m.err)
    assert_eq "$desc: stdout" "$qo rc=$qrc" "$mo rc=$mrc"
    assert_eq "$desc: stderr" "$qe" "$me"
    for t in q m; do
        "$QEMU_IMG" info --output=json $t.qcow2 >info.out
        count d info.out '"dirty-flag": true'
        if [ "$writes" = 1 ]; then
            assert_eq "$desc: $t.qcow2 clean after" 0 "$d"
            assert_rc "$desc: $t.qcow2 checks clean" 0 "$QEMU_IMG" check -q $t.qcow2
        else
            assert_eq "$desc: $t.qcow2 still dirty" 1 "$d"
        fi
    done
}
# (the repair runs as the image opens, whatever the command: every command
# over the killed image, whose refcounts are rebuilt; over the leaky one and
# the clean one a writer and a reader of each kind, qemu-io's and
# qemu-img's; QIMG_LONG=1: every command over each)
for img in killed.qcow2 leaky.qcow2 clean.qcow2; do
    all=
    [ $img = killed.qcow2 ] || [ -n "${QIMG_LONG:-}" ] && all=1
    dirty_both "$img: io read" $img 1 io -c 'read 0 512' @
    [ -n "$all" ] && dirty_both "$img: io write" $img 1 io -c 'write -P 5 64k 4k' @
    [ -n "$all" ] && dirty_both "$img: amend" $img 1 amend -o lazy_refcounts=off @
    dirty_both "$img: resize" $img 1 resize @ 8M
    [ -n "$all" ] && dirty_both "$img: snapshot -c" $img 1 snapshot -c s1 @
    [ -n "$all" ] && dirty_both "$img: bitmap --add" $img 1 bitmap --add @ b0
    [ -n "$all" ] && dirty_both "$img: rebase -u" $img 1 rebase -u -b '' @
    dirty_both "$img: io -r" $img 0 io -r -c 'read 0 512' @
    [ -n "$all" ] && dirty_both "$img: map" $img 0 map --output=json @
    [ -n "$all" ] && dirty_both "$img: info" $img 0 info --output=json @
    dirty_both "$img: check" $img 0 check @
done
# the repair's lines are there at all (the comparison above is not of two
# empty outputs)
cp killed.qcow2 m.qcow2
"$QIMG" io -c 'read 0 512' m.qcow2 >/dev/null 2>m.err
assert_eq "killed.qcow2: the rebuild line" 1 "$(grep -c '^Rebuilding refcount structure$' m.err)"
cp leaky.qcow2 m.qcow2
"$QIMG" resize m.qcow2 8M >/dev/null 2>m.err
assert_eq "leaky.qcow2: the repaired leaks" 3 "$(grep -c '^Repairing cluster [0-9]* refcount=1 reference=0$' m.err)"

# qemu-img commit: a dirty top is repaired as it opens (QEMU prints the
# lines); a dirty base is reopened read-write, which QEMU does quietly (it
# repairs nothing: its base keeps the leaks, qimg's is repaired)
qi create -f qcow2 cb.qcow2 4M
qi create -f qcow2 -b cb.qcow2 -F qcow2 ct.qcow2
qio ct.qcow2 'write -P 6 0 64k'
for side in top base; do
    for t in q m; do
        cp cb.qcow2 ${t}b.qcow2
        cp ct.qcow2 ${t}t.qcow2
        qi rebase -u -b ${t}b.qcow2 -F qcow2 ${t}t.qcow2
        if [ $side = top ]; then
            python3 leak.py ${t}t.qcow2 2
        else
            python3 leak.py ${t}b.qcow2 2
        fi
    done
    "$QEMU_IMG" commit qt.qcow2 >q.out 2>q.err
    qrc=$?
    "$QIMG" commit mt.qcow2 >m.out 2>m.err
    mrc=$?
    assert_eq "commit, dirty $side: stdout" "$(<q.out) rc=$qrc" "$(<m.out) rc=$mrc"
    assert_eq "commit, dirty $side: stderr" "$(<q.err)" "$(<m.err)"
    want=0
    [ $side = top ] && want=4 # 2 "Leaked cluster", 2 "Repairing cluster"
    assert_eq "commit, dirty $side: the repair's lines" $want \
        "$(grep -c '^Leaked cluster\|^Repairing cluster' m.err)"
    assert_rc "commit, dirty $side: qimg's base checks clean" 0 "$QEMU_IMG" check -q mb.qcow2
    assert_eq "commit, dirty $side: the data" "$("$QEMU_IMG" compare qb.qcow2 mb.qcow2)" \
        "Images are identical."
done

finish
