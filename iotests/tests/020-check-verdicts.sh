#!/bin/bash
# qimg check against qemu-img check on images broken with byte edits at
# known header and table offsets (020-qcow2edit.py): leaks, refcounts too
# low / zero / too high, the refcount table's own refcount 0, unaligned and
# out-of-file L2 entries and tables, OFLAG_COPIED mismatches, COPIED on a
# compressed cluster, reserved bits, broken refcount blocks (unaligned, past
# the end, missing, reserved bits), snapshot table problems (unaligned or
# too large L1, too much extra data, incomplete v3 extra data, unaligned
# table, too many snapshots), refcount overflow with refcount_bits=1, a
# crash with lazy refcounts (dirty bit), the corrupt bit, bitmaps, extended
# L2 entries, compat 0.10.
#
# For every image, and for check, check -r leaks and check -r all, each
# with human and JSON output (every run on a fresh copy; make test leaves
# out the JSON of -r leaks, whose fields check -r all's JSON has too, and
# QIMG_LONG=1 runs it):
#   - stdout byte for byte, stderr (qemu-img's prefix read as qimg's) and
#     the exit code equal qemu-img's;
#   - after a repair, qemu-img check gives the same verdict and summary on
#     qimg's copy as on qemu-img's own, and is clean when qemu-img's repair
#     made its copy clean (a copy that still holds the bytes of the image,
#     or of qemu-img's copy, has the verdict already known for those bytes:
#     qemu-img check is not run on it again).
# make test also leaves out the JSON of -r all on snap-too-many: QEMU's
# repair of its 65537 snapshots costs seconds of CPU (a quarter of the
# test's), its human run repairs the same image, and every other image
# runs -r all's JSON; QIMG_LONG=1 runs it.
# Where QEMU 7.2 fails a repair that qimg completes (a rebuild that trips
# over the old, broken refcount block), qimg's rebuild must complete
# instead; when that check marked the image corrupt (the broken block is
# unaligned), the double check fails with "No medium found" and the
# replaced structure stays leaked, as in QEMU's own 060 (check.c invariant
# 8), and a second repair must leave qimg's copy clean.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3

mkdir -p cases

qio() { # qio IMG CMD...
    local img=$1 args=() c
    shift
    for c in "$@"; do
        args+=(-c "$c")
    done
    "$QEMU_IO" -f qcow2 "${args[@]}" "$img" >.qio.out 2>&1
}

# base NAME [create options] [size]: data in two clusters, one compressed,
# one zeroed (preallocated) cluster.  (The cluster size: the options' or
# qcow2's default.)
base() {
    local name=cases/$1 opts=${2:-} size=${3:-64M} cs=65536
    "$QEMU_IMG" create -q -f qcow2 ${opts:+-o "$opts"} "$name.qcow2" "$size" ||
        { echo "setup: create $1"; exit 1; }
    if [[ ",$opts," =~ ,cluster_size=([0-9]+)(k?), ]]; then
        cs=${BASH_REMATCH[1]}
        [ -n "${BASH_REMATCH[2]}" ] && cs=$((cs * 1024))
    fi
    qio "$name.qcow2" "write -P 1 0 128k" "write -c -P 2 1M $cs" \
        "write -P 3 2M 64k" "write -z 2M 64k" || { echo "setup: qemu-io $1"; exit 1; }
}

# with_snapshot NAME: base plus an internal snapshot and a write after it
with_snapshot() {
    base "$1" "${2:-}"
    "$QEMU_IMG" snapshot -c snap1 "cases/$1.qcow2" && qio "cases/$1.qcow2" "write -P 4 0 64k"
}

# Layout of the default base image (64 KiB clusters): header 0, reftable
# 0x10000, refblock 0x20000, L1 0x30000, L2 0x40000, data 0x50000 and
# 0x60000, then the compressed and the zero-allocated clusters.

# ---- the images ----

# the images QEMU's tools make, then (below) one python3 derives the broken
# ones by byte edits (020-qcow2edit.py's commands; a python3 each was ~2 s
# of CPU)
base clean
base clean-512 cluster_size=512,refcount_bits=64 4M
base clean-v2 compat=0.10
base clean-xl2 extended_l2=on,cluster_size=128k
with_snapshot snap
with_snapshot snap-v2 compat=0.10
# refcount overflow: 1-bit refcounts and a snapshot sharing everything
# (fake-snapshot below)
base rc1 refcount_bits=1
# a crash with lazy refcounts leaves the dirty bit and wrong refcounts
"$QEMU_IMG" create -q -f qcow2 -o lazy_refcounts=on cases/dirty.qcow2 64M
sh -c '"$0" -f qcow2 -c "write -P 1 0 128k" -c abort cases/dirty.qcow2' "$QEMU_IO" \
    >/dev/null 2>&1
# bitmaps: clean, and (below) a leaked bitmap cluster
base bitmaps
"$QEMU_IMG" bitmap --add cases/bitmaps.qcow2 b0
"$QEMU_IMG" bitmap --add cases/bitmaps.qcow2 b1

python3 - "$IOTESTS_DIR/tests/020-qcow2edit.py" <<'PY' || { echo "setup: the edits failed"; exit 1; }
import importlib.util, os, shutil, sys
spec = importlib.util.spec_from_file_location("qcow2edit", sys.argv[1])
qe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(qe)
MiB = 1 << 20
def path(name):
    return "cases/%s.qcow2" % name
def derive(new, frm):  # a copy of an image to edit
    shutil.copyfile(path(frm), path(new))
def ed(name, cmd, *args):
    qe.edit(path(name), cmd, *args)
def l2(name, guest):
    i = qe.Image(path(name))
    v = i.u64(i.l2_entry_offset(guest))
    i.f.close()
    return v

# leaks: an extra cluster past the end with refcount 1; refcount 2 for a
# cluster used once
derive("leak", "clean")
os.truncate(path("leak"), 16 * 65536)
ed("leak", "setref", 15, 1)
derive("leak-high", "clean")
ed("leak-high", "setref", 5, 2)

# refcount too low: a second L2 entry shares data cluster 5 (refcount 1)
derive("low", "clean")
ed("low", "l2", 4 * MiB, "0x8000000000050000")
# refcount 0 for a used data cluster, and for the refcount table itself
derive("zero", "clean")
ed("zero", "setref", 5, 0)
derive("zero-reftable", "clean")
ed("zero-reftable", "setref", 1, 0)
# refcount too low in an image with a snapshot
derive("snap-low", "snap")
ed("snap-low", "setref", 6, 1)

# unaligned L2 entries: data, and a preallocated zero cluster
derive("unaligned-data", "clean")
ed("unaligned-data", "l2", 0, "0x8000000000050200")
derive("unaligned-zero", "clean")
ed("unaligned-zero", "l2", 2 * MiB, l2("clean", 2 * MiB) + 0x200)
# L2 entry past the end of the file; L2 table past the end; unaligned L2 table
derive("past-data", "clean")
ed("past-data", "l2", 65536, "0x8000000010000000")
derive("past-l2", "clean")
ed("past-l2", "l1", 0, "0x8000000010000000")
derive("unaligned-l2", "clean")
ed("unaligned-l2", "l1", 0, "0x8000000000040200")
derive("pb-138", "clean-512")
ed("pb-138", "l2", 0, "0x8080000000000000")

# OFLAG_COPIED: missing in an L2 entry and in the L1 entry; set on a shared
# cluster (after a snapshot); set on a compressed cluster
derive("copied-l2", "clean")
ed("copied-l2", "l2", 65536, "0x60000")
derive("copied-l1", "clean")
ed("copied-l1", "l1", 0, "0x40000")
derive("copied-shared", "snap")
ed("copied-shared", "l2", 65536, l2("snap", 65536) | (1 << 63))
derive("copied-compressed", "clean")
ed("copied-compressed", "l2", MiB, l2("clean", MiB) | (1 << 63))

# reserved bits
derive("reserved-l1", "clean")
ed("reserved-l1", "l1", 0, "0x8000000000040001")
derive("reserved-l2", "clean")
ed("reserved-l2", "l2", 0, "0x8000000000050002")
derive("reserved-reftable", "clean")
ed("reserved-reftable", "reftable", 0, "0x20001")

# refcount blocks: unaligned, past the end, missing
derive("rb-unaligned", "clean")
ed("rb-unaligned", "reftable", 0, "0x20200")
derive("rb-past", "clean")
ed("rb-past", "reftable", 0, "0x1000000")
derive("rb-missing", "clean")
ed("rb-missing", "reftable", 0, 0)

# snapshot table
snap = qe.Image(path("snap"))
snap_l1 = qe.struct.unpack(">Q", snap.read(snap.snapshot_entries()[0][0], 8))[0]
snap.f.close()
derive("snap-l1-unaligned", "snap")
ed("snap-l1-unaligned", "snapfield", 0, "l1_offset", snap_l1 + 0x200)
derive("snap-l1-big", "snap")
ed("snap-l1-big", "snapfield", 0, "l1_size", "0x400001")
derive("snap-extra-big", "snap")
ed("snap-extra-big", "snapfield", 0, "extra_size", 1100)
derive("snap-extra-short", "snap")
ed("snap-extra-short", "snapfield", 0, "extra_size", 8)
derive("snap-table-unaligned", "snap")
ed("snap-table-unaligned", "poke", 64, "Q", snap.snapshots_offset + 512)
derive("snap-too-many", "snap")
ed("snap-too-many", "poke", 60, "I", 65537)

# refcount overflow: a snapshot sharing everything with 1-bit refcounts
ed("rc1", "fake-snapshot", "s1")

# the corrupt bit on an image without errors
derive("corrupt-bit", "clean")
ed("corrupt-bit", "poke", 72, "Q", 2)

# bitmaps: a leaked bitmap cluster
derive("bitmaps-leak", "bitmaps")
bm = qe.Image(path("bitmaps"))
ed("bitmaps-leak", "setref", bm.bitmap_directory()[0] // 65536, 2)
bm.f.close()

# extended L2: an allocated cluster whose bitmap says allocated and zero
derive("xl2-bitmap", "clean-xl2")
xl2 = qe.Image(path("clean-xl2"))
ed("xl2-bitmap", "poke", xl2.l2_entry_offset(0) + 8, "Q", "0x0000000100000001")
xl2.f.close()

# a leak in a compat 0.10 image with a snapshot
derive("v2-leak", "snap-v2")
os.truncate(path("v2-leak"), 64 * 65536)
ed("v2-leak", "setref", 63, 1)
PY

# ---- the comparison ----

# Cases where QEMU 7.2's own repair fails (rebuild blocked by the old,
# broken refcount block) and qimg's completes.
QIMG_BETTER=" rb-unaligned reserved-reftable "

# The loop below runs ~240 times: it reads, rewrites and compares the
# tools' (small, text) output with the shell's builtins, runs each tool in
# q/ or m/ with cd rather than in a subshell, and keeps the human run's
# images in qh/ and mh/ (the JSON run's in qj/ and mj/): a process costs
# ~8 ms of CPU, and cp, cmp, sed, grep, mv and the subshells were most of
# this test's time.
mkdir -p qh mh qj mj

# err_same: qemu-img's q.err, its prefixes and hints as qimg prints them
# ("qemu-img: " at a line's start, "qemu-img check -r all"), holds the
# bytes of qimg's m.err (cmp); the normalized text left in q.err.n when not.
err_same() {
    local q m
    if IFS= read -r -d '' q <q.err || IFS= read -r -d '' m <m.err; then
        # a NUL byte, where read stops: sed and cmp
        sed -e 's/^qemu-img: /qimg: /' -e 's/qemu-img check -r all/qimg check -r all/' \
            q.err >q.err.n
        cmp -s q.err.n m.err
        return
    fi
    q=$'\n'$q
    q=${q//$'\n'qemu-img: /$'\n'qimg: }
    q=${q#$'\n'}
    q=${q//qemu-img check -r all/qimg check -r all}
    [[ "$q" == "$m" ]] && return 0
    printf '%s' "$q" >q.err.n
    return 1
}

# no_end_offset VAR FILE: VAR = FILE's lines (each ending in a newline)
# but those that start "Image end offset" (grep -v).
no_end_offset() {
    local _l _o=
    while IFS= read -r _l || [ -n "$_l" ]; do
        [[ "$_l" == "Image end offset"* ]] || _o+=$_l$'\n'
    done <"$2"
    printf -v "$1" '%s' "$_o"
}

for img in cases/*.qcow2; do
    name=${img##*/}
    name=${name%.qcow2}
    for fix in "" "-r leaks" "-r all"; do
        for out in human json; do
            # make test: JSON for check and check -r all (whose JSON has
            # the repair's fields too); QIMG_LONG=1: for -r leaks as well
            [ "$fix$out" = "-r leaksjson" ] && [ -z "${QIMG_LONG:-}" ] && continue
            [ "$name$fix$out" = "snap-too-many-r alljson" ] && [ -z "${QIMG_LONG:-}" ] &&
                continue
            qd=q${out:0:1}
            md=m${out:0:1}
            tee $qd/t.qcow2 $md/t.qcow2 <"$img" >/dev/null
            cd $qd || exit 1
            # shellcheck disable=SC2086
            "$QEMU_IMG" check $fix --output=$out t.qcow2 >../q.out 2>../q.err
            q_rc=$?
            cd ../$md || exit 1
            # shellcheck disable=SC2086
            timeout 60 "$QIMG" check $fix --output=$out t.qcow2 >../m.out 2>../m.err
            m_rc=$?
            cd .. || exit 1
            what="$name: check $fix --output=$out"
            if [ -n "$fix" ] && [[ "$QIMG_BETTER" == *" $name "* ]]; then
                _checks=$((_checks + 1))
                if [ "$m_rc" != 0 ] && [ "$fix" = "-r all" ] &&
                    ! { [ "$m_rc" = 1 ] &&
                        grep -q 'Check failed: No medium found' m.err; }; then
                    _fail "$what: qimg exit $m_rc, expected a repair"
                fi
            else
                _checks=$((_checks + 3))
                same_bytes q.out m.out || {
                    _fail "$what: stdout differs (- qemu-img, + qimg)"
                    diff -u q.out m.out | head -n 30
                }
                err_same || {
                    _fail "$what: stderr differs (- qemu-img, + qimg)"
                    diff -u q.err.n m.err | head -n 30
                }
                [ "$q_rc" = "$m_rc" ] || _fail "$what: exit code qemu-img $q_rc, qimg $m_rc"
            fi
            if [ -z "$fix" ]; then
                # qemu-img check's verdict on the image's own bytes (the
                # human run: the form of the checks after a repair below)
                [ $out = human ] && no_end_offset q0_out q.out && q0=$q_rc
                continue
            fi
            # The JSON run repairs a copy of the same image as the human
            # run did: when both tools left the same bytes as then, the
            # verdicts after the repair are the ones just judged.
            if [ $out = json ] && cmp -s qj/t.qcow2 qh/t.qcow2 && cmp -s mj/t.qcow2 mh/t.qcow2; then
                continue
            fi
            # after the repair: qemu-img's verdict on both copies.  QEMU
            # rewrites the bitmap directory when it opens an image
            # read-write, so the image end offset may differ; and when a
            # repair fails half-way, what reached the disk may differ too
            # (QEMU drops its cached refcount fixes): then the verdict only.
            # qemu-img check is deterministic: a copy that holds the bytes
            # of the image (a repair that changed nothing) has the verdict
            # of the check run on the image, and qimg's copy that holds the
            # bytes of qemu-img's has the verdict of qemu-img's copy.
            if cmp -s $qd/t.qcow2 "$img"; then
                q2_out=$q0_out q2=$q0
            else
                cd $qd || exit 1
                "$QEMU_IMG" check t.qcow2 >../q2.raw 2>/dev/null
                q2=$?
                cd .. || exit 1
                no_end_offset q2_out q2.raw
            fi
            if cmp -s $md/t.qcow2 $qd/t.qcow2; then
                m2_out=$q2_out m2=$q2
            elif cmp -s $md/t.qcow2 "$img"; then
                m2_out=$q0_out m2=$q0
            else
                cd $md || exit 1
                "$QEMU_IMG" check t.qcow2 >../m2.raw 2>/dev/null
                m2=$?
                cd .. || exit 1
                no_end_offset m2_out m2.raw
            fi
            _checks=$((_checks + 1))
            if [[ "$QIMG_BETTER" == *" $name "* ]] && [ "$fix" = "-r all" ]; then
                if [ "$m2" != 0 ] && [ "$m_rc" = 1 ]; then # the leak, repaired again
                    (cd $md && "$QIMG" check -r all t.qcow2 >/dev/null 2>&1 &&
                        "$QEMU_IMG" check t.qcow2 >/dev/null 2>&1)
                    m2=$?
                fi
                [ "$m2" = 0 ] || _fail "$what: qemu-img check after qimg's repair: exit $m2"
            elif [ "$q2" != "$m2" ] || { [ "$q_rc" != 1 ] && [ "$q2_out" != "$m2_out" ]; }; then
                _fail "$what: after repair qemu-img check says $q2 on its copy, $m2 on qimg's"
                diff -u <(printf '%s' "$q2_out") <(printf '%s' "$m2_out") | head -n 20
            elif [ "$q_rc" = 0 ] && [ "$m2" != 0 ]; then
                _fail "$what: qemu-img check is not clean on qimg's repaired copy"
            fi
            # (the check above opens them read-only: qh/ and mh/ keep the
            # human run's images as repaired, for the JSON run's cmp)
        done
    done
done

finish
