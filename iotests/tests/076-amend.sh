#!/bin/bash
# qimg amend against qemu-img amend on copies of the same images (qcow2/amend.c):
#  - compat=0.10 <-> 1.1, refcount_bits 1..64, lazy_refcounts, size, the
#    data file's name and raw flag: the same exit code and messages, the
#    same qemu-img info (but the file's size), contents unchanged, and
#    qemu-img check finds no error and no leak in what qimg made; the
#    header (cluster 0) byte for byte after a version change;
#  - v2 and v3, clusters of 512 bytes, 64 KiB and 2 MiB, zero clusters
#    (plain and preallocated, over a backing file too) and internal
#    snapshots on downgrade (every snapshot reads as before: QEMU 7.2 loses
#    a snapshot's data there, see amend.c invariant 4), bitmaps (kept, as
#    7.2 does), zstd, an external data file;
#  - every refusal: create-only options, unknown ones, bad values, the
#    backing file, downgrade with features v2 lacks, refcount overflow,
#    raw images, missing files, -o help, an image in use;
#  - -p and -q;
#  - power loss during a refcount width change (no state with an error or
#    a leak: amend.c invariant 5), during a downgrade that expands zero
#    clusters and during an upgrade that rewrites the snapshot table (the
#    crash-state explorer: 6 states a case in make test, CRASH_STATES to
#    choose; QIMG_LONG=1: crash/lib.sh's long count).
# make test does not check again the image of a case that differs from an
# earlier one only in flags (-p, -q, -t, compat=v2); QIMG_LONG=1 does, and
# runs more refcount widths.  QEMU 7.2 takes ~1.2 s of CPU for any refcount
# width change with 64 KiB clusters (most of this test's CPU): make test
# leaves out two upgrades of v2.qcow2 with a width change that another case
# runs too, "-o compat=1.1,refcount_bits=1" (as "-p -o
# compat=1.1,refcount_bits=1" but for -p) and "-o compat=1.1,refcount_bits=4"
# (the same upgrade to width 4, which "-p -o refcount_bits=4" on v3.qcow2
# runs); QIMG_LONG=1 runs both.  The widths on 64 KiB clusters are 1 and 8
# in make test (2 and 4 there in the cases above), every width with
# QIMG_LONG=1: width 64 runs on 512-byte clusters, here
# and on the sparse image (a refcount table of several clusters).  For the
# same reason (QEMU's time grows with the cluster size: ~0.05 s with 16
# KiB clusters) make test runs the compressed and the data file cases on
# 16 KiB clusters (what they check, shared compressed clusters and an
# external data file, does not depend on it; 64 KiB clusters change widths
# in the other cases) and a width change with a snapshot on 512-byte
# clusters only (with 64 KiB: a refusal); QIMG_LONG=1 runs them as well on
# 64 KiB clusters.
. "${0%/*}/../common.sh"
CRASH_STATES=${CRASH_STATES:-6}
. "$IOTESTS_DIR/crash/lib.sh"
requires qimg qemu-img qemu-io python3

mkdir -p q m

# info_of VAR IMG: VAR = qemu-img info --output=json IMG (and its errors)
# without the file's size, its trailing newlines dropped (as $(...)).
info_of() {
    local _l _o=
    "$QEMU_IMG" info --output=json "$2" >.info 2>&1
    while IFS= read -r _l || [ -n "$_l" ]; do
        [[ "$_l" == *'"actual-size"'* ]] || _o+=$_l$'\n'
    done <.info
    while [[ "$_o" == *$'\n' ]]; do _o=${_o%$'\n'}; done
    printf -v "$1" '%s' "$_o"
}

# chk_of VAR FILE: VAR = "$(sed 's/Image end offset.*//; s/Leaked
# cluster.*//' FILE)" by the shell's builtins
chk_of() {
    local _l _o=
    while IFS= read -r _l || [ -n "$_l" ]; do
        _l=${_l%%Image end offset*}
        _o+=${_l%%Leaked cluster*}$'\n'
    done <"$2"
    while [[ "$_o" == *$'\n' ]]; do _o=${_o%$'\n'}; done
    printf -v "$1" '%s' "$_o"
}

# amend_both DESC IMG ARGS...: amend copies q/img.qcow2 (qemu-img) and
# m/img.qcow2 (qimg) of IMG with ARGS (img.qcow2 among them), in q/ and m/;
# then the same exit code, stdout and stderr; after a success the same
# info, the same contents, and for qimg's copy qemu-img check as clean as
# for qemu-img's (QEMU_BROKEN=1: qemu-img's copy is wrong, check qimg's
# alone; FLAGS=1: the case differs from one before it only in flags such
# as -p, -q or -t, and the image after it is not checked again in make
# test).  Where both copies are still IMG byte for byte (a refusal, -o
# help, nothing to change), info, contents and check are IMG's for both:
# not run again.  AMEND_RC: the exit code.
amend_both() {
    local desc=$1 img=$2 qrc mrc
    shift 2
    cp "$img" q/img.qcow2
    cp "$img" m/img.qcow2
    # (cd, not a subshell, and the shell's own reads: this runs ~130
    # times, and a process costs ~8 ms of CPU; see common.sh)
    cd q || exit 1
    "$QEMU_IMG" amend "$@" >../q.out 2>../q.err
    qrc=$?
    cd ../m || exit 1
    "$QIMG" amend "$@" >../m.out 2>../m.err
    mrc=$?
    cd .. || exit 1
    AMEND_RC=$mrc
    local qerr
    as_qimg_err qerr q.err
    assert_eq "$desc: exit code" "$qrc" "$mrc"
    assert_eq "$desc: stdout" "$(<q.out)" "$(<m.out)"
    assert_eq "$desc: stderr" "${qerr//"'qemu-img rebase'"/"'qimg rebase'"}" "$(<m.err)"
    [ "$qrc" = 0 ] && [ "$mrc" = 0 ] || return 0
    [ "${FLAGS:-0}" = 1 ] && [ -z "${QIMG_LONG:-}" ] && return 0
    cmp -s "$img" q/img.qcow2 && cmp -s "$img" m/img.qcow2 && return 0
    local qinfo minfo
    cd q || exit 1
    info_of qinfo img.qcow2
    cd ../m || exit 1
    info_of minfo img.qcow2
    cd .. || exit 1
    assert_eq "$desc: info" "$qinfo" "$minfo"
    assert_rc "$desc: contents unchanged" 0 "$QEMU_IMG" compare "$img" m/img.qcow2
    if [ "${QEMU_BROKEN:-0}" = 1 ]; then
        assert_rc "$desc: check" 0 "$QEMU_IMG" check -q m/img.qcow2
    else
        "$QEMU_IMG" check q/img.qcow2 >q.chk 2>&1
        "$QEMU_IMG" check m/img.qcow2 >m.chk 2>&1
        # (which clusters leak differs where QEMU moved the bitmap directory)
        local qchk mchk
        chk_of qchk q.chk
        chk_of mchk m.chk
        assert_eq "$desc: check" "$qchk" "$mchk"
    fi
}

# same_snapshots DESC BEFORE AFTER: every internal snapshot reads the same.
same_snapshots() {
    local n
    for n in $("$QEMU_IMG" snapshot -l "$2" | awk 'NR > 2 {print $2}'); do
        "$QEMU_IMG" convert -l "$n" -O raw "$2" s0.raw
        "$QEMU_IMG" convert -l "$n" -O raw "$3" s1.raw
        same_file "$1: snapshot $n" s0.raw s1.raw
    done
}

# --- refusals and messages (nothing changes; -f, -o help, files) ---
mk_qcow2 v3.qcow2 64M "" 'write -P 1 0 1M' 'write -z 2M 1M'
mk_qcow2 v2.qcow2 64M compat=0.10 'write -P 1 0 1M'
qi create -q -f raw r.raw 1M
for args in "-o cluster_size=512" "-o extended_l2=on" "-o compression_type=zstd" \
    "-o preallocation=off" "-o encryption=on" "-o encrypt.format=luks" \
    "-o cluster_size=512,foo=bar" "-o foo=bar" "-o nocow=on" "-o encrypt.new-secret=x" \
    "-o compat=0.9" "-o refcount_bits=3" "-o refcount_bits=128" "-o refcount_bits=abc" \
    "-o lazy_refcounts=maybe" "-o size=abc" "-o size=1000" "-o data_file=x" \
    "-o data_file_raw=on" "-o backing_file=x" "-o backing_fmt=qcow2" \
    "-o compat=0.10,refcount_bits=8" "-o compat=0.10,lazy_refcounts=on" "-o ''" \
    "-o compat=1.1," "-o ,compat=1.1" "-o compat=1.1,," "" "-x" "-o" "-t foo -o compat=1.1" \
    "-o help" "-o compat=1.1,help" "-o ?" "-f qcow2 -o help" "-f raw -o help" \
    "-f foo -o help" "-f raw -o size=2M" "-p -o foo=bar" "-p -o size=1000" "-p -o help" \
    "-p -f qcow2 -o help"; do
    eval "set -- $args"
    amend_both "v3 $args" v3.qcow2 "$@" img.qcow2
done
for args in "-o lazy_refcounts=on" "-o refcount_bits=8" "-o compat=1.1,backing_file=x" \
    "-o compat=1.1,refcount_bits=1"; do
    # (a success, not a refusal: make test runs it with -p below)
    [ "$args" = "-o compat=1.1,refcount_bits=1" ] && [ -z "${QIMG_LONG:-}" ] && continue
    eval "set -- $args"
    amend_both "v2 $args" v2.qcow2 "$@" img.qcow2
done
cp r.raw q/r.raw
cp r.raw m/r.raw
for args in "-o compat=1.1 r.raw" "-o help r.raw" "-f raw -o help r.raw" \
    "-o compat=1.1 nosuch.qcow2" "-o help nosuch.qcow2" "-o compat=1.1 a b" \
    "-o compat=1.1" "-o help" "-p -o compat=1.1 nosuch.qcow2"; do
    eval "set -- $args"
    amend_both "$args" v3.qcow2 "$@"
done
if hold_image v3.qcow2; then
    same_as_qemu_err amend -o compat=0.10 v3.qcow2
    kill "$HOLDER"
    wait "$HOLDER" 2>/dev/null
fi

# --- changes: v2 <-> v3, lazy refcounts, size, -p, -q ---
mk_qcow2 sn.qcow2 64M "" 'write -P 1 0 1M' 'write -z 2M 1M' 'write -P 2 8M 100k'
qi snapshot -c s1 sn.qcow2
qio sn.qcow2 'write -z 0 256k' 'write -P 3 4M 64k' 'write -z 8M 64k'
qi snapshot -c s2 sn.qcow2
qio sn.qcow2 'write -z 4M 64k'
for args in "-o compat=0.10" "-o compat=v2" "-o lazy_refcounts=on" "-o size=128M" \
    "-o size=32M" "-o size=0" "-p -o compat=0.10" "-p -o lazy_refcounts=on" \
    "-q -p -o compat=0.10" "-o compat=0.10,lazy_refcounts=off" "-t none -o compat=0.10" \
    "-p -o refcount_bits=4" "-p -o refcount_bits=64,compat=0.10"; do
    eval "set -- $args"
    flags=0
    case $args in "-o compat=v2" | "-p -o compat=0.10" | "-p -o lazy_refcounts=on" | \
        "-q -p -o compat=0.10" | "-t none -o compat=0.10") flags=1 ;;
    esac
    FLAGS=$flags amend_both "v3 $args" v3.qcow2 "$@" img.qcow2
done
amend_both "v3 compat=0.10: header" v3.qcow2 -o compat=0.10 img.qcow2
assert_rc "v3 compat=0.10: header" 0 cmp <(head -c 4096 q/img.qcow2) <(head -c 4096 m/img.qcow2)
for args in "-o compat=1.1" "-o compat=1.1,lazy_refcounts=on" "-o compat=1.1,refcount_bits=4" \
    "-p -o compat=1.1" "-o size=128M" "-p -o compat=1.1,refcount_bits=1"; do
    [ "$args" = "-o compat=1.1,refcount_bits=4" ] && [ -z "${QIMG_LONG:-}" ] && continue
    eval "set -- $args"
    flags=0
    [ "$args" = "-p -o compat=1.1" ] && flags=1
    FLAGS=$flags amend_both "v2 $args" v2.qcow2 "$@" img.qcow2
done
amend_both "v2 compat=1.1: header" v2.qcow2 -o compat=1.1 img.qcow2
assert_rc "v2 compat=1.1: header" 0 cmp <(head -c 4096 q/img.qcow2) <(head -c 4096 m/img.qcow2)

# a v2 image whose snapshots have no extra data (as old QEMU wrote them):
# the upgrade rewrites the snapshot table first (amend.c invariant 2)
strip_snapshot_extra() {
    python3 - "$1" <<'PY'
import struct, sys
f = open(sys.argv[1], "r+b")
nb, off = struct.unpack(">IQ", f.read(72)[60:72])
f.seek(off)
raw = f.read(1 << 20)
out, p = bytearray(), 0
for _ in range(nb):
    e = bytearray(raw[p:p + 40])
    id_len, name_len = struct.unpack(">HH", e[12:16])
    extra = struct.unpack(">I", e[36:40])[0]
    e[36:40] = bytes(4)
    ent = bytes(e) + raw[p + 40 + extra:p + 40 + extra + id_len + name_len]
    out += ent + bytes(-len(ent) % 8)
    p += 40 + extra + id_len + name_len
    p += -p % 8
f.seek(off)
f.write(out + bytes(p - len(out)))
PY
}
mk_qcow2 v2s.qcow2 64M compat=0.10 'write -P 1 0 1M'
qi snapshot -c snap1 v2s.qcow2
qio v2s.qcow2 'write -P 2 0 64k'
qi snapshot -c s2 v2s.qcow2
strip_snapshot_extra v2s.qcow2
amend_both "v2 no snapshot extra data compat=1.1" v2s.qcow2 -o compat=1.1 img.qcow2
same_snapshots "v2 no snapshot extra data compat=1.1" v2s.qcow2 m/img.qcow2

# downgrade with zero clusters and snapshots (QEMU 7.2 zeroes preallocated
# clusters its snapshots still read: only qimg's result is checked fully)
QEMU_BROKEN=1 amend_both "snapshots compat=0.10" sn.qcow2 -o compat=0.10 img.qcow2
same_snapshots "snapshots compat=0.10" sn.qcow2 m/img.qcow2
# an L2 table the active L1 shares with the snapshot: zeroed in place
mk_qcow2 sh.qcow2 64M "" 'write -P 1 0 1M' 'write -z 0 256k' 'write -z 2M 64k'
qi snapshot -c s sh.qcow2
amend_both "shared L2 compat=0.10" sh.qcow2 -o compat=0.10 img.qcow2
same_snapshots "shared L2 compat=0.10" sh.qcow2 m/img.qcow2
assert_eq "shared L2 compat=0.10: map" "$(map_flags q/img.qcow2)" "$(map_flags m/img.qcow2)"
# over a backing file plain zero clusters get data clusters
mk_qcow2 top.qcow2 64M backing_file=v3.qcow2,backing_fmt=qcow2 'write -z 0 128k' \
    'write -z 512k 64k' 'write -P 4 1M 64k'
cp v3.qcow2 q/v3.qcow2
cp v3.qcow2 m/v3.qcow2
amend_both "backing compat=0.10" top.qcow2 -o compat=0.10 img.qcow2
assert_eq "backing compat=0.10: map" "$(map_flags q/img.qcow2)" "$(map_flags m/img.qcow2)"
amend_both "backing backing_file same" top.qcow2 -o backing_file=v3.qcow2,backing_fmt=qcow2 \
    img.qcow2
amend_both "backing backing_file other" top.qcow2 -o backing_file=v2.qcow2,backing_fmt=qcow2 \
    img.qcow2

# features a v2 image lacks; bitmaps are kept (as 7.2 keeps them)
for o in refcount_bits=8 extended_l2=on data_file=img.data lazy_refcounts=on \
    compression_type=zstd; do
    mk_qcow2 f.qcow2 64M "$o" 'write -P 1 0 64k'
    [ "$o" = data_file=img.data ] && cp img.data q/ && cp img.data m/
    amend_both "$o compat=0.10" f.qcow2 -o compat=0.10 img.qcow2
done
mk_qcow2 f.qcow2 64M compression_type=zstd 'write -c -P 1 0 64k'
amend_both "zstd compressed compat=0.10" f.qcow2 -o compat=0.10 img.qcow2
# compressed clusters share host clusters: refcounts above 1 (three
# clusters in one: refcount 3; 16 KiB clusters in make test, $CS16: see
# the head)
CS16=,cluster_size=16k c=16384
[ -n "${QIMG_LONG:-}" ] && CS16= c=65536
mk_qcow2 f.qcow2 64M "$CS16" "write -c -P 1 0 $c" "write -c -P 2 $c $c" \
    "write -c -P 3 $((2 * c)) $c"
amend_both "compressed refcount_bits=1" f.qcow2 -o refcount_bits=1 img.qcow2
amend_both "compressed refcount_bits=2" f.qcow2 -o refcount_bits=2 img.qcow2
amend_both "compressed compat=0.10" f.qcow2 -o compat=0.10 img.qcow2
mk_qcow2 f.qcow2 64M "" 'write -P 1 0 1M'
qi bitmap --add f.qcow2 b0
amend_both "bitmaps compat=0.10" f.qcow2 -o compat=0.10 img.qcow2
mk_qcow2 f.qcow2 64M "data_file=img.data,data_file_raw=on$CS16" 'write -P 1 0 1M'
cp img.data q/
cp img.data m/
for args in "-o data_file_raw=off" "-o data_file_raw=on" "-o refcount_bits=2" \
    "-o data_file=img.data"; do
    eval "set -- $args"
    amend_both "data file $args" f.qcow2 "$@" img.qcow2
done
# an empty name drops the name but not the feature (the image then opens
# nowhere, in QEMU neither): the same header
cp f.qcow2 q/img.qcow2
cp f.qcow2 m/img.qcow2
(cd q && "$QEMU_IMG" amend -o data_file= img.qcow2)
assert_rc "data file -o data_file=" 0 sh -c "cd m && '$QIMG' amend -o data_file= img.qcow2"
assert_rc "data file -o data_file=: header" 0 cmp <(head -c 65536 q/img.qcow2) \
    <(head -c 65536 m/img.qcow2)

# --- refcount widths, cluster sizes (QEMU with 2 MiB clusters and narrow
# refcounts takes minutes: qimg's result alone there) ---
for cs in 512 64k; do
    widths=(1 8)
    [ $cs = 512 ] && widths=(2 64)
    [ -n "${QIMG_LONG:-}" ] && widths=(1 2 4 8 16 32 64)
    mk_qcow2 w.qcow2 64M "cluster_size=$cs" 'write -P 1 0 1M' 'write -z 2M 1M' \
        'write -P 2 8M 100k'
    for b in "${widths[@]}"; do
        amend_both "cluster $cs refcount_bits=$b" w.qcow2 -o refcount_bits=$b img.qcow2
        [ "$AMEND_RC" = 0 ] && [ -n "${QIMG_LONG:-}" ] || continue
        cp m/img.qcow2 w2.qcow2
        amend_both "cluster $cs refcount_bits=$b then 16" w2.qcow2 -o refcount_bits=16 img.qcow2
    done
    qi snapshot -c s w.qcow2
    amend_both "cluster $cs snapshot refcount_bits=1" w.qcow2 -o refcount_bits=1 img.qcow2
    if [ $cs = 512 ] || [ -n "${QIMG_LONG:-}" ]; then
        amend_both "cluster $cs snapshot refcount_bits=2" w.qcow2 -o refcount_bits=2 img.qcow2
    fi
    QEMU_BROKEN=1 amend_both "cluster $cs snapshot compat=0.10" w.qcow2 -o compat=0.10 img.qcow2
    same_snapshots "cluster $cs snapshot compat=0.10" w.qcow2 m/img.qcow2
done
mk_qcow2 w.qcow2 64M cluster_size=2M 'write -P 1 0 1M' 'write -z 4M 2M'
amend_both "cluster 2M compat=0.10" w.qcow2 -o compat=0.10 img.qcow2
for b in 1 64; do
    cp w.qcow2 m/img.qcow2
    assert_rc "cluster 2M refcount_bits=$b" 0 "$QIMG" amend -o refcount_bits=$b m/img.qcow2
    assert_rc "cluster 2M refcount_bits=$b: check" 0 "$QEMU_IMG" check -q m/img.qcow2
    assert_eq "cluster 2M refcount_bits=$b: width" "$b" \
        "$("$QEMU_IMG" info --output=json m/img.qcow2 | sed -n 's/.*"refcount-bits": \([0-9]*\).*/\1/p')"
    assert_rc "cluster 2M refcount_bits=$b: contents" 0 "$QEMU_IMG" compare w.qcow2 m/img.qcow2
done
# a table of several clusters and sparse refcount blocks (512-byte clusters)
mk_qcow2 big.qcow2 256M cluster_size=512 'write -P 1 0 256k' 'write -P 2 100M 256k' \
    'write -P 3 200M 64k'
amend_both "sparse refcount_bits=1" big.qcow2 -o refcount_bits=1 img.qcow2
amend_both "sparse refcount_bits=64" big.qcow2 -o refcount_bits=64 img.qcow2

# --- power loss ---
d=$SCRATCH/crash
mkdir -p "$d"
"$QEMU_IMG" create -q -f qcow2 -o cluster_size=4k "$d/img.qcow2" 32M
"$QEMU_IO" -c 'write -P 7 0 2M' -c 'write -P 8 8M 1M' "$d/img.qcow2" >/dev/null
"$QEMU_IMG" convert -O raw "$d/img.qcow2" "$d/A0.raw"
crash_op refcount-bits "$d" --expect-raw "$d/A0.raw" -- amend -o refcount_bits=4 @IMG@
assert_eq "refcount-bits: no state leaks" "" \
    "$(tail -n 1 "$CRASH_SUMMARY" | grep -o '"leaks": [0-9]*')"
"$QEMU_IMG" create -q -f qcow2 -o cluster_size=4k "$d/img.qcow2" 32M
"$QEMU_IO" -c 'write -P 7 0 2M' -c 'write -P 8 8M 1M' -c 'write -z 0 64k' \
    -c 'write -z 9M 64k' "$d/img.qcow2" >/dev/null
"$QEMU_IMG" snapshot -c s "$d/img.qcow2"
"$QEMU_IO" -c 'write -z 1M 64k' -c 'write -P 9 2M 8k' -c 'write -z 2M 4k' "$d/img.qcow2" >/dev/null
"$QEMU_IMG" convert -O raw "$d/img.qcow2" "$d/A1.raw"
crash_op downgrade "$d" --expect-raw "$d/A1.raw" -- amend -o compat=0.10 @IMG@
cp v2s.qcow2 "$d/img.qcow2"
"$QEMU_IMG" convert -O raw "$d/img.qcow2" "$d/A2.raw"
crash_op upgrade "$d" --expect-raw "$d/A2.raw" -- amend -o compat=1.1,refcount_bits=2 @IMG@
crash_summary

finish
