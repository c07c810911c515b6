#!/bin/bash
# Malformed qcow2 images (the classes of QEMU iotests 060 and 080, and
# more): header fields out of range, tables unaligned / past the end /
# overlapping, refcount structure problems, snapshot table problems,
# truncated files, random bytes, backing file loops.
#
# Every command (info, map, convert, compare, check, snapshot -l, convert -l
# for snapshot classes, and io when qimg has it) runs on every image under
# `timeout 20`.  Each must end with the expected exit code and, where it
# fails, a message naming the problem (a substring is asserted); never a
# crash, a sanitizer report or a hang.
#
# Which build runs a command: make test runs each (image, command) pair
# once.  When the ASan/UBSan build exists, it runs check on every image
# (check reads every table itself, so every image goes through a checked
# parser) but those whose check fails to open them as every command does
# (open_fails without a CHECK-SPEC: the same open path, to the same error,
# which the image's rotating command below takes under ASan; ~30 of ~60
# images, ~4 s of CPU), and one more command per image, rotating info, map,
# convert, compare, snapshot -l, io over the images in order (each command
# meets the checked build on about a sixth of the images, of every class),
# and the convert -l runs; the normal build runs the rest.  A pair the ASan
# build runs needs no normal run: both builds compile the same sources, and the
# checked build asserts the same exit code and message while also failing
# on any out-of-bounds access, use after free, leak or undefined behaviour
# that could make the optimised build act differently.  (An ASan start
# costs ~5 times a normal one, which is why not every pair runs under it.)
# QIMG_LONG=1: both builds run every command on every image, and 8 random
# seeds instead of 3 (tables) and 2 (whole files).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3

EDIT=("python3" "$IOTESTS_DIR/tests/020-qcow2edit.py")
ASAN_QIMG=$REPO_DIR/build-asan/tools/qimg
[ -x "$ASAN_QIMG" ] || ASAN_QIMG=
LONG=${QIMG_LONG:-}
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1
HAVE_IO=
"$QIMG" io --help >/dev/null 2>&1 && HAVE_IO=1

# ed IMG COMMAND [ARGS...]: 020-qcow2edit.py's edit of IMG (its output
# dropped), run by one python3 that serves the whole test (a coprocess
# started on first use, as crash/lib.sh's crash_py): a python3 start and
# the module's import cost ~60 ms of CPU, and the test makes ~50 edits.
# ed_magic IMG: MAGIC = the hex of IMG's first 4 bytes, from the same
# python3 (od and tr were two more processes an image).
ED_SERVER='import ast, os, sys, traceback
# (the script calls main() at its end, unguarded: its code without that
# statement)
tree = ast.parse(open(sys.argv[1]).read(), sys.argv[1])
tree.body = [n for n in tree.body if not (isinstance(n, ast.Expr) and
             isinstance(n.value, ast.Call) and getattr(n.value.func, "id", "") == "main")]
edit = {"__name__": "qcow2edit"}
exec(compile(tree, sys.argv[1], "exec"), edit)
reply, inp = os.fdopen(3, "w", buffering=1), sys.stdin.buffer
def tokens():
    buf = b""
    while True:
        more = inp.read1(65536)
        if not more:
            return
        buf += more
        *done, buf = buf.split(b"\0")
        yield from (t.decode() for t in done)
toks = tokens()
for n in toks:
    argv = [next(toks) for _ in range(int(n))]
    rc, magic = 0, ""
    try:
        if argv[0] == "magic":
            with open(argv[1], "rb") as f:
                magic = f.read(4).hex()
        else:
            sys.argv = ["020-qcow2edit.py"] + argv
            edit["main"]()
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    except Exception:
        traceback.print_exc()
        rc = 1
    sys.stdout.flush()
    reply.write("%d %s\n" % (rc, magic))
'
_ED_PID=
ed_call() {
    local rc
    if [ -z "$_ED_PID" ]; then
        # requests (the count of the arguments, then each, NUL-ended) on its
        # stdin, answers (the exit code and the magic) on fd 3
        exec {_ed_out}>&1
        coproc _ED { exec python3 -c "$ED_SERVER" "${EDIT[1]}" 3>&1 1>&"$_ed_out"; }
        exec {_ed_out}>&-
        # shellcheck disable=SC2153 # (set by coproc)
        _ED_PID=$_ED_PID
        _ED_IN=${_ED[1]}
        _ED_OUT=${_ED[0]}
    fi
    printf '%s\0' "$#" "$@" >&"$_ED_IN"
    read -r rc MAGIC <&"$_ED_OUT" || { echo "setup: the edit server died ($*)"; exit 1; }
    return "$rc"
}
ed() {
    ed_call "$@" >/dev/null || { echo "setup: edit $* failed"; exit 1; }
}
ed_magic() {
    ed_call magic "$1" || { echo "setup: reading $1 failed"; exit 1; }
}

# ---- run one command and judge it ----

# try BIN WANT_RC SUBSTRING ARGS...: WANT_RC may be a list "1|2"; SUBSTRING
# (may be empty) must appear in stdout or stderr.  (The outputs are read
# with bash builtins: no process per judgement.)
try() {
    local bin=$1 want=$2 sub=$3 rc out= err=
    shift 3
    timeout 20 "$bin" "$@" >.out 2>.err
    rc=$?
    _checks=$((_checks + 1))
    IFS= read -r -d '' out <.out
    IFS= read -r -d '' err <.err
    local what="${bin##*/build}: qimg $*"
    if [ "$rc" = 124 ]; then
        _fail "$what: hang (timeout)"
        return
    fi
    if [ "$rc" -ge 128 ] || [[ "$err" =~ AddressSanitizer|LeakSanitizer|runtime\ error:|[Aa]ssertion ]]; then
        _fail "$what: crash or sanitizer report (exit $rc)"
        head -n 20 .err
        return
    fi
    if [[ "|$want|" != *"|$rc|"* ]]; then
        _fail "$what: exit $rc, expected $want"
        head -n 5 .err
        return
    fi
    if [ -n "$sub" ] && [[ "$out" != *"$sub"* ]] && [[ "$err" != *"$sub"* ]]; then
        _fail "$what: no '$sub' in the output"
        head -n 5 .err
        return
    fi
    if [ "$rc" != 0 ] && [ -z "$err" ] && [ -z "$out" ]; then
        _fail "$what: failed (exit $rc) without saying why"
    fi
}

# run_cmd NAME WANT_RC SUBSTRING ARGS...: try qimg ARGS (command NAME) with
# the builds the header describes: both under QIMG_LONG=1, else the ASan
# build when NAME is check (unless open_fails cleared asan_check) or the
# image's rotating command ($asan_cmd), else the normal one.
run_cmd() {
    local name=$1
    shift
    if [ -z "$ASAN_QIMG" ]; then
        try "$QIMG" "$@"
    elif [ -n "$LONG" ]; then
        try "$QIMG" "$@"
        try "$ASAN_QIMG" "$@"
    elif { [ "$name" = check ] && [ -n "$asan_check" ]; } || [ "$name" = "$asan_cmd" ]; then
        try "$ASAN_QIMG" "$@"
    else
        try "$QIMG" "$@"
    fi
}

# cmds IMG INFO MAP CONVERT COMPARE CHECK SNAPSHOT: each argument is
# "RC|RC:substring" for that command; '-' skips it.
ROTATION=(info map convert compare snapshot io)
_img_no=0
cmds() {
    local img=$1 spec magic i=0
    shift
    local names=(info map convert compare check snapshot)
    asan_cmd=${ROTATION[$((_img_no % ${#ROTATION[@]}))]}
    _img_no=$((_img_no + 1))
    ed_magic "$img"
    magic=$MAGIC
    for spec in "$@"; do
        local name=${names[$i]}
        i=$((i + 1))
        [ "$spec" = - ] && continue
        local want=${spec%%:*} sub=${spec#*:}
        [ "$sub" = "$spec" ] && sub=
        case $name in
        info) run_cmd info "$want" "$sub" info -f qcow2 "$img" ;;
        map) run_cmd map "$want" "$sub" map -f qcow2 --output=json "$img" ;;
        convert)
            rm -f out.raw
            run_cmd convert "$want" "$sub" convert -f qcow2 -O raw "$img" out.raw
            ;;
        compare) run_cmd compare "$want" "$sub" compare -f qcow2 -F qcow2 "$img" good.qcow2 ;;
        check) run_cmd check "$want" "$sub" check -f qcow2 "$img" ;;
        # snapshot has no -f (as in qemu-img 7.2): a file without the
        # qcow2 magic probes as raw and lists nothing, like qemu-img.
        snapshot) [ "$magic" = 514649fb ] &&
                      run_cmd snapshot "$want" "$sub" snapshot -l "$img" ;;
        esac
    done
    if [ -n "$HAVE_IO" ]; then
        # whatever it says, io must not crash or hang on the image
        run_cmd io "0|1|2" "" io -f qcow2 -c 'read 0 64k' "$img"
    fi
}

# open_fails IMG MESSAGE [CHECK-SPEC]: every command fails to open the image
# with MESSAGE (compare exits 2 for that); check may differ (it reads some
# tables itself, as qemu-img check does).
asan_check=1
open_fails() {
    local img=$1 msg=$2 check=${3:-"1:$2"}
    [ -n "${3:-}" ] || asan_check=
    cmds "$img" "1:$msg" "1:$msg" "1:$msg" "2:$msg" "$check" "1:$msg"
    asan_check=1
}

fresh() {
    rm -f "$1"
    "$QEMU_IMG" create -q -f qcow2 "$1" 64M || exit 1
    "$QEMU_IO" -f qcow2 -c 'write -P 1 0 128k' "$1" >/dev/null || exit 1
}

variant() { # variant NAME EDIT...
    local name=$1
    shift
    cp good.qcow2 "$name.qcow2"
    ed "$name.qcow2" "$@"
}

fresh good.qcow2

# ---- header fields (iotest 080) ----

variant hdr-len poke 100 I 0xffffffff
open_fails hdr-len.qcow2 "qcow2 header exceeds cluster size (header_length 4294967295"
variant hdr-len-short poke 100 I 50
open_fails hdr-len-short.qcow2 "qcow2 header too short (header_length 50"
variant backing-offset poke 8 Q 0xffffffffffffffff
open_fails backing-offset.qcow2 "Invalid backing file offset 0xffffffffffffffff"
variant ext-huge poke 112 I 0x12345678
ed ext-huge.qcow2 poke 116 I 0x7fffffff
open_fails ext-huge.qcow2 "Header extension too large (type 0x12345678, length 2147483647"
variant backing-size poke 8 Q 0x1000
ed backing-size.qcow2 poke 16 I 0xffffffff
open_fails backing-size.qcow2 "Backing file name too long (backing_file_size 4294967295"
variant magic poke 0 I 0x51464900
open_fails magic.qcow2 "Image is not in qcow2 format"
variant version poke 4 I 4
open_fails version.qcow2 "Unsupported qcow2 version 4"
variant cluster-bits poke 20 I 22
open_fails cluster-bits.qcow2 "Unsupported cluster size: 2^22"
variant cluster-bits-low poke 20 I 8
open_fails cluster-bits-low.qcow2 "Unsupported cluster size: 2^8"
variant refcount-order poke 96 I 7
open_fails refcount-order.qcow2 "Reference count entry width too large"
variant incompat poke 72 Q 0x100
open_fails incompat.qcow2 "Unsupported qcow2 feature(s): Unknown incompatible feature: 100"
variant compression-type poke 104 B 7
open_fails compression-type.qcow2 "unknown compression type: 7"

# refcount table: huge size, misaligned, huge offset, none
variant rt-clusters poke 56 I 0xffffffff
open_fails rt-clusters.qcow2 "Reference count table too large (refcount_table_clusters 4294967295"
variant rt-clusters2 poke 56 I 0x20001
open_fails rt-clusters2.qcow2 "Reference count table too large (refcount_table_clusters 131073"
variant rt-misaligned poke 48 Q 0x1234567890abcdef
open_fails rt-misaligned.qcow2 "Reference count table offset 0x1234567890abcdef is not aligned"
variant rt-huge poke 48 Q 0xffffffffffff0000
ed rt-huge.qcow2 poke 56 I 0x7f
open_fails rt-huge.qcow2 "Reference count table offset 0xffffffffffff0000 invalid"
variant rt-past poke 48 Q 0x100000000
open_fails rt-past.qcow2 "Reference count table (offset 0x100000000, 65536 bytes) extends past the end of the file"
# qemu-img check opens it and rebuilds; so does qimg check
variant rt-none poke 56 I 0
open_fails rt-none.qcow2 "Image does not contain a reference count table" \
    "2:ERROR cluster 0 refcount=0 reference=1"

# L1 table: huge, misaligned, huge offset, past the end, too small
variant l1-size poke 36 I 0xffffffff
open_fails l1-size.qcow2 "L1 table too large (4294967295 entries"
variant l1-size2 poke 36 I 0x7fffffff
open_fails l1-size2.qcow2 "L1 table too large (2147483647 entries"
variant l1-huge poke 40 Q 0x7fffffffffff0000
ed l1-huge.qcow2 poke 36 I 0xffff
open_fails l1-huge.qcow2 "L1 table offset 0x7fffffffffff0000 invalid"
variant l1-misaligned poke 40 Q 0x1234567890abcdef
open_fails l1-misaligned.qcow2 "L1 table offset 0x1234567890abcdef is not aligned"
variant l1-past poke 40 Q 0x100000000
open_fails l1-past.qcow2 "L1 table (offset 0x100000000, 8 bytes) extends past the end of the file"
variant l1-small poke 36 I 0
open_fails l1-small.qcow2 "L1 table is too small (l1_size 0"

# snapshot table pointer: too many, huge offset, misaligned (qemu-img check
# reads the table itself and says so in QEMU's words)
variant snap-nb poke 60 I 0xffffffff
open_fails snap-nb.qcow2 "Snapshot table too large (4294967295 entries" \
    "1:ERROR snapshot table too large"
variant snap-offset-huge poke 64 Q 0xffffffffffff0000
ed snap-offset-huge.qcow2 poke 60 I 0xffff
open_fails snap-offset-huge.qcow2 "Snapshot table offset 0xffffffffffff0000 invalid" \
    "1:ERROR snapshot table offset invalid"
variant snap-offset-misaligned poke 64 Q 0x1234567890abcdef
ed snap-offset-misaligned.qcow2 poke 60 I 1
open_fails snap-offset-misaligned.qcow2 "Snapshot table offset 0x1234567890abcdef is not aligned" \
    "1:ERROR snapshot table offset invalid"

# ---- snapshot entries ----

cp good.qcow2 snap.qcow2
"$QEMU_IMG" snapshot -c test snap.qcow2 || exit 1
cp snap.qcow2 snap-extra.qcow2
ed snap-extra.qcow2 snapfield 0 extra_size 2000
open_fails snap-extra.qcow2 "Too much extra metadata in snapshot table entry 0" \
    "1:ERROR failed to read the snapshot table: Too much extra metadata in snapshot table entry 0"
cp snap.qcow2 snap-idlen.qcow2
ed snap-idlen.qcow2 snapfield 0 id_len 0xffff
# the ID runs past the end of the file, which reads as zeros (snapshot.c
# invariant 2): QEMU opens it and lists ID "1test", no name; check counts
# the cluster past the end
cmds snap-idlen.qcow2 0 0 0 0 "2:ERROR cluster 9 refcount=0 reference=1" "0:1test"
same_as_qemu snapshot -l snap-idlen.qcow2
same_as_qemu info --output=json snap-idlen.qcow2
# a v2 image cut inside its snapshot table: check finds nothing (v2 entries
# need no extra data), so it must open, as in QEMU (the fuzz target
# fuzz-qcow2-check found the mismatch)
rm -f snap-cut.qcow2
"$QEMU_IMG" create -q -f qcow2 -o compat=0.10 snap-cut.qcow2 1M || exit 1
"$QEMU_IMG" snapshot -c s1 snap-cut.qcow2 || exit 1
cut_at=$("${EDIT[@]}" snap-cut.qcow2 info | sed -n 's/^snapshots_offset=//p')
truncate -s $((cut_at + 20)) snap-cut.qcow2
cmds snap-cut.qcow2 0 0 0 - 0 0
same_as_qemu_err check snap-cut.qcow2
same_as_qemu snapshot -l snap-cut.qcow2
snap_l1=$("${EDIT[@]}" snap.qcow2 snapfield 0 l1_offset)
cp snap.qcow2 snap-l1-misaligned.qcow2
ed snap-l1-misaligned.qcow2 snapfield 0 l1_offset $((snap_l1 + 0x200))
cmds snap-l1-misaligned.qcow2 0 0 0 0 \
    "2:L1 table is not cluster aligned; snapshot table entry corrupted" 0
cp snap.qcow2 snap-l1-size.qcow2
ed snap-l1-size.qcow2 snapfield 0 l1_size 0x10000000
cmds snap-l1-size.qcow2 0 0 0 0 "2:L1 table is too large; snapshot table entry corrupted" 0
cp snap.qcow2 snap-l1-past.qcow2
ed snap-l1-past.qcow2 snapfield 0 l1_offset 0x10000000000
cmds snap-l1-past.qcow2 0 0 0 0 \
    "2:counting reference for region exceeding the end of the file by one cluster or more: offset 0x10000000000" 0
asan_cmd=convert-l
run_cmd convert-l 1 "Snapshot L1 table offset 0x$(printf %x $((snap_l1 + 0x200))) is not aligned" \
    convert -O raw -l test snap-l1-misaligned.qcow2 out.raw
run_cmd convert-l 1 "Snapshot L1 table too large (268435456 entries" \
    convert -O raw -l test snap-l1-size.qcow2 out.raw
run_cmd convert-l 1 "Snapshot L1 table (offset 0x10000000000, 8 bytes) extends past the end" \
    convert -O raw -l test snap-l1-past.qcow2 out.raw

# ---- tables and entries (iotests 060, 080) ----

# an L2 entry with a huge physical offset (compressed / normal)
variant l2-huge-compressed l2 0 0xbfffffffffff0000
cmds l2-huge-compressed.qcow2 0 "1:L2 entry 0xbfffffffffff0000 has reserved bits set" \
    "1:L2 entry 0xbfffffffffff0000 has reserved bits set" 3 \
    "2:ERROR found l2 entry with reserved bits set: bfffffffffff0000" 0
variant l2-huge l2 0 0x800000ffffff0000
cmds l2-huge.qcow2 0 0 0 1 \
    "2:counting reference for region exceeding the end of the file by one cluster or more: offset 0xffffff0000" 0
variant compressed-huge l2 0 0x7fffffffffffffff
# (compare words a failed read as qemu-img does, with the errno's text
# alone: tools/compare.c fact 5; convert names the cause)
cmds compressed-huge.qcow2 0 0 "1:Could not decompress" \
    "4:Error while reading offset 0 of compressed-huge.qcow2: Input/output error" \
    "2:counting reference for region exceeding the end of the file" 0
# unaligned data cluster, unaligned / past-the-end L2 table
variant l2-unaligned l2 0 0x8000000000050200
cmds l2-unaligned.qcow2 0 "1:Cluster allocation offset 0x50200 unaligned" \
    "1:Cluster allocation offset 0x50200 unaligned" 3 \
    "2:ERROR offset=50200: Data cluster is not properly aligned; L2 entry corrupted." 0
variant l2-table-unaligned l1 0 0x8000000000040200
cmds l2-table-unaligned.qcow2 0 "1:L2 table offset 0x40200 unaligned (L1 index: 0)" \
    "1:L2 table offset 0x40200 unaligned" 3 \
    "2:ERROR l2_offset=40200: Table is not cluster aligned; L1 entry corrupted" 0
variant l2-table-past l1 0 0x8000001000000000
cmds l2-table-past.qcow2 0 "1:L2 table offset 0x1000000000 (L1 index: 0) is beyond the end of the file" \
    "1:is beyond the end of the file" 3 \
    "2:counting reference for region exceeding the end of the file by one cluster or more: offset 0x1000000000" 0
variant l1-reserved l1 0 0x8000000000040001
cmds l1-reserved.qcow2 0 "1:L1 entry 0x8000000000040001 has reserved bits set" \
    "1:has reserved bits set" 3 "2:ERROR found L1 entry with reserved bits set: 8000000000040001" 0
# an L2 table that is the L1 table; a data cluster that is the refcount block
variant l2-into-l1 l1 0 0x8000000000030000
cmds l2-into-l1.qcow2 0 0 0 1 "2:ERROR cluster 3 refcount=1 reference=3" 0
variant data-into-refblock l2 0 0x8000000000020000
cmds data-into-refblock.qcow2 0 0 0 1 "2:ERROR refcount block 0 refcount=2" 0

# refcount blocks: past the end, unaligned, reserved bits
variant rb-past reftable 0 0x1000000000
cmds rb-past.qcow2 0 0 0 0 "2:ERROR refcount block 0 is outside image" 0
variant rb-unaligned reftable 0 0x20200
cmds rb-unaligned.qcow2 0 0 0 0 "1:ERROR refcount block 0 is not cluster aligned" 0
variant rb-reserved reftable 0 0x20001
cmds rb-reserved.qcow2 0 0 0 0 "2:ERROR refcount table entry 0 has reserved bits set" 0

# compressed cluster in an image with an external data file
rm -f df.qcow2 df.raw
"$QEMU_IMG" create -q -f qcow2 -o data_file=df.raw df.qcow2 64M
"$QEMU_IO" -f qcow2 -c 'write -P 1 0 64k' df.qcow2 >/dev/null
cp df.qcow2 df-compressed.qcow2
ed df-compressed.qcow2 l2 0 0x4000000000050000
cmds df-compressed.qcow2 0 "1:Compressed cluster entry found in image with external data file" \
    "1:Compressed cluster entry found in image with external data file" 3 \
    "2:ERROR compressed cluster 0 with data file" 0

# ---- truncated files ----

head -c 50 good.qcow2 >trunc-header.qcow2
open_fails trunc-header.qcow2 "qcow2 header too short (header_length 0"
head -c $((0x28000)) good.qcow2 >trunc-tables.qcow2
open_fails trunc-tables.qcow2 "L1 table (offset 0x30000, 8 bytes) extends past the end of the file"
# cut in the middle of the L2 table, the data clusters gone: the table's
# part past the end and the data read as zeros, as QEMU reads them
# (cluster.c invariant 1); check says what is missing
head -c $((0x48000)) good.qcow2 >trunc-data.qcow2
cmds trunc-data.qcow2 0 0 0 1 \
    "2:counting reference for region exceeding the end of the file by one cluster or more" 0
# an L2 table wholly past the end stays a corruption
head -c $((0x40000)) good.qcow2 >trunc-l2.qcow2
cmds trunc-l2.qcow2 0 "1:L2 table offset 0x40000 (L1 index: 0) is beyond the end of the file" \
    "1:is beyond the end of the file" 3 \
    "2:counting reference for region exceeding the end of the file by one cluster or more" 0
: >empty.qcow2
open_fails empty.qcow2 "Image is not in qcow2 format"

# ---- backing file loops ----

rm -f loop-a.qcow2 loop-b.qcow2 self.qcow2
"$QEMU_IMG" create -q -f qcow2 loop-b.qcow2 1M
"$QEMU_IMG" create -q -f qcow2 -b loop-b.qcow2 -F qcow2 loop-a.qcow2 1M
"$QEMU_IMG" rebase -u -b loop-a.qcow2 -F qcow2 loop-b.qcow2
"$QEMU_IMG" create -q -f qcow2 self.qcow2 1M
"$QEMU_IMG" rebase -u -b self.qcow2 -F qcow2 self.qcow2
for img in loop-a.qcow2 self.qcow2; do
    # info and snapshot -l do not open the backing chain (as qemu-img)
    cmds "$img" 0 "1:creates an infinite loop" "1:creates an infinite loop" \
        "2:creates an infinite loop" "1:creates an infinite loop" 0
done

# ---- random bytes ----

# a valid header over random tables, and files of random bytes (fixed
# seeds; one python3 makes them all)
table_seeds=(1 2 3) file_seeds=(1 2)
[ -n "$LONG" ] && table_seeds=(1 2 3 4 5 6 7 8) file_seeds=(1 2 3 4 5 6 7 8)
python3 - good.qcow2 "${table_seeds[*]}" "${file_seeds[*]}" <<'EOF' || exit 1
import random, sys
good = open(sys.argv[1], 'rb').read()
for seed in sys.argv[2].split():
    random.seed(int(seed))
    d = bytearray(good)
    for i in range(0x10000, len(d)):
        d[i] = random.randrange(256) if random.random() < 0.3 else d[i]
    open("rand-tables-%s.qcow2" % seed, 'wb').write(bytes(d))
for seed in sys.argv[3].split():
    random.seed(int(seed))
    open("rand-%s.qcow2" % seed, 'wb').write(bytes(random.randrange(256) for _ in range(200000)))
EOF
for seed in "${table_seeds[@]}"; do
    cmds "rand-tables-$seed.qcow2" "0|1" "0|1" "0|1" "0|1|2|3|4" "0|1|2|3" "0|1"
done
for seed in "${file_seeds[@]}"; do
    open_fails "rand-$seed.qcow2" "Image is not in qcow2 format"
done

finish
