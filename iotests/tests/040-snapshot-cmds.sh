#!/bin/bash
# qimg snapshot -c/-a/-d/-l against qemu-img snapshot, on copies of the same
# images (several qcow2 variants): the same sequence of operations is run by
# each tool on its own copy, then
#   - qemu-img check finds the qimg copy clean (no errors, no leaks);
#   - qemu-img snapshot -l lists the same snapshots for both copies (dates
#     aside), and qimg snapshot -l prints exactly what qemu-img prints;
#   - the active layer and the virtual size (qemu-img compare) and every
#     snapshot's contents (qemu-img convert -l ID) are equal between the
#     copies;
#   (qemu-img check after every step; the rest where the step changed it,
#   the active layer after an apply, the lists after a delete, and all of
#   it after the steps that create snapshots and at the end of each
#   sequence; QIMG_LONG=1: all of it after every step: compare_copies)
#   - qemu-img can apply the snapshots qimg created and the reverse;
#   - applying a snapshot taken before a resize restores the disk size;
#   - messages and exit codes of the failures equal qemu-img's.
# make test runs five qcow2 variants; QIMG_LONG=1 adds compat=0.10 and
# lazy_refcounts=on.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io cmp python3

MiB=$((1024 * 1024))

head -c $((2 * MiB)) /dev/urandom >rand.bin

# qio IMG CMD...: qemu-io commands (one process), which must succeed.
# both ARGS...: "snapshot ARGS IMG" with qimg on $M and qemu-img on $Q; both
# must succeed with the same (empty) output.
both() {
    local out_m out_q rc_m rc_q
    out_m=$("$QIMG" snapshot "$@" "$M" 2>&1)
    rc_m=$?
    out_q=$("$QEMU_IMG" snapshot "$@" "$Q" 2>&1)
    rc_q=$?
    assert_eq "$V: snapshot $* exit code (qemu-img $rc_q)" "$rc_q" "$rc_m"
    assert_eq "$V: snapshot $* output" "$out_q" "$out_m"
}

# nodate VAR LISTING: VAR = LISTING without its DATE column's values (the
# tools ran at different times), by the shell's builtins.
_date_re='[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}'
nodate() {
    local _l _o=
    while IFS= read -r _l; do
        [[ "$_l" =~ $_date_re ]] && _l=${_l/"${BASH_REMATCH[0]}"/DATE}
        _o+=$_l$'\n'
    done <<<"$2"
    printf -v "$1" '%s' "${_o%$'\n'}"
}

# same_active STEP: qemu-img compare of the active layers says exactly
# "Images are identical." (an image size mismatch adds a warning line:
# the virtual sizes are checked too).
same_active() {
    local out rc
    out=$("$QEMU_IMG" compare "$Q" "$M" 2>&1)
    rc=$?
    assert_eq "$V/$1: active layer and virtual size (qemu-img compare, rc $rc)" \
        "Images are identical." "$out"
}

# same_list STEP [qimg]: qemu-img snapshot -l lists the same snapshots for
# both copies (dates aside); with "qimg", qimg snapshot -l prints exactly
# what qemu-img prints for the qimg copy.  QL: qemu-img's list of $Q.
same_list() {
    local ml a b
    QL=$("$QEMU_IMG" snapshot -l "$Q")
    ml=$("$QEMU_IMG" snapshot -l "$M")
    nodate a "$QL"
    nodate b "$ml"
    assert_eq "$V/$1: qemu-img snapshot -l" "$a" "$b"
    [ "${2:-}" = qimg ] || return 0
    assert_eq "$V/$1: qimg snapshot -l equals qemu-img snapshot -l" \
        "$ml" "$("$QIMG" snapshot -l "$M" 2>&1)"
}

# Snapshot contents: each snapshot read by qemu-img convert -l ID into a
# raw file; the pairs go to pairs.txt and one python3 compares them all at
# the end of a sequence (cmp_snapshots).  qemu-img's reading of snapshot ID
# N of its own copy is read once in a sequence (ref-N.raw: the snapshot
# holds the same data at every step, and IDs are not reused; REF: a key
# for sequences that resize, where convert -l reads a snapshot with the
# disk size of the active layer), and each of IMG... (default $M) is
# compared with it.
# snap_contents STEP [IMG...]
: >pairs.txt
snap_contents() {
    local step=$1 id img ref k=0
    shift
    [ $# -gt 0 ] || set -- "$M"
    # (the IDs: the first column of the list, after its two title lines)
    while read -r id _; do
        [[ "$id" == [0-9]* ]] || continue
        ref=ref${REF:-}-$id.raw
        [ -e "$ref" ] || "$QEMU_IMG" convert -l "$id" -O raw "$Q" "$ref" ||
            _fail "$V/$step: qemu-img convert -l $id $Q"
        for img in "$@"; do
            k=$((k + 1))
            "$QEMU_IMG" convert -l "$id" -O raw "$img" "$step-$id-$k.raw" ||
                _fail "$V/$step: qemu-img convert -l $id $img"
            echo "$V/$step:_snapshot_${id}_of_$img $ref $step-$id-$k.raw" >>pairs.txt
        done
    done <<<"$QL"
}
# cmp_snapshots: compare the pairs (sparse: holes in both are not read),
# a check each, then drop the raw files.
cmp_snapshots() {
    local out n
    out=$(python3 "$IOTESTS_DIR/sparse_cmp.py" --pairs pairs.txt)
    n=${out##*$'\n'}
    [[ "$n" =~ ^[0-9]+$ ]] || { _fail "$V: snapshot comparison: $out"; n=0; }
    _checks=$((_checks + n))
    while IFS= read -r l; do
        [[ "$l" == FAILED:* ]] && _fail "${l#FAILED: }"
    done <<<"$out"
    rm -f ./*.raw
    : >pairs.txt
}

# compare_copies STEP [all [IMG...]]: the checks of the header comment, by
# what the step changed: qemu-img check of the qimg copy after every step;
# after an apply the active layers (and sizes: same_active); after a delete
# the lists; with "all" (where the step created snapshots, at the end of a
# sequence, around a resize) all of it: the lists, qimg's own list, the
# active layers, and every snapshot's contents in $M and each IMG.  An
# apply leaves the table, a delete the active layer as they were: the next
# "all" step compares them again.  QIMG_LONG=1: all of it at every step.
compare_copies() {
    local step=$1 what=${2:-}
    assert_rc "$V/$step: qemu-img check of the qimg copy" 0 "$QEMU_IMG" check "$M"
    if [ "$what" = all ] || [ -n "${QIMG_LONG:-}" ]; then
        same_list "$step" qimg
        same_active "$step"
        shift
        [ $# -gt 0 ] && shift
        snap_contents "$step" "$M" "$@"
        return 0
    fi
    case $step in
    apply*) same_active "$step" ;;
    delete*) same_list "$step" ;;
    *) same_list "$step" && same_active "$step" ;;
    esac
}

variants=(
    ""
    "cluster_size=512"
    "cluster_size=2M"
    "extended_l2=on,cluster_size=128k"
    "refcount_bits=4"
)
# QIMG_LONG=1 (make check-long): these too
if [ -n "${QIMG_LONG:-}" ]; then
    variants+=("compat=0.10" "lazy_refcounts=on")
fi

for V in "${variants[@]}"; do
    o=${V:+-o $V}
    # shellcheck disable=SC2086
    qi create -f qcow2 $o base.qcow2 64M
    qio base.qcow2 "write -q -s rand.bin 0 $MiB" "write -q -P 0x11 $((5 * MiB + 3)) 70000"
    cp base.qcow2 m.qcow2
    cp base.qcow2 q.qcow2
    M=m.qcow2
    Q=q.qcow2

    both -c s1
    qio "$M" "write -q -P 0x22 $((MiB / 2)) $MiB" "write -q -s rand.bin $((60 * MiB)) 4000"
    qio "$Q" "write -q -P 0x22 $((MiB / 2)) $MiB" "write -q -s rand.bin $((60 * MiB)) 4000"
    both -c s2
    both -c s1 # a second snapshot called s1 (names need not be unique)
    both -q -c ""
    compare_copies create all

    both -a s1 # ID first, then name: the first s1
    compare_copies apply-s1
    both -a 2 # by ID
    compare_copies apply-2
    qio "$M" "write -q -P 0x33 0 12345"
    qio "$Q" "write -q -P 0x33 0 12345"
    both -d s1 # by name: the first s1 (ID 1)
    compare_copies delete-s1
    both -d s1 # the second one
    both -c s4
    compare_copies delete-create all
    both -a s2
    compare_copies apply-s2

    # Each tool applies and deletes what the other created.
    cp "$M" cross-m.qcow2
    cp "$Q" cross-q.qcow2
    assert_rc "$V: qemu-img applies qimg's s4" 0 "$QEMU_IMG" snapshot -a s4 cross-m.qcow2
    assert_rc "$V: qimg applies qemu-img's s4" 0 "$QIMG" snapshot -a s4 cross-q.qcow2
    assert_rc "$V: qemu-img deletes qimg's s2" 0 "$QEMU_IMG" snapshot -d s2 cross-m.qcow2
    assert_rc "$V: qimg deletes qemu-img's s2" 0 "$QIMG" snapshot -d s2 cross-q.qcow2
    M=cross-m.qcow2
    Q=cross-q.qcow2
    compare_copies cross all cross-q.qcow2
    cmp_snapshots
    rm -f base.qcow2 m.qcow2 q.qcow2 cross-m.qcow2 cross-q.qcow2
done

# Apply restores the disk size of the snapshot (v3 images may be resized
# with snapshots; growing and shrinking).
V=resize
for new in 128M 32M; do
    qi create -f qcow2 base.qcow2 64M
    qio base.qcow2 "write -q -s rand.bin $((63 * MiB)) $MiB"
    cp base.qcow2 m.qcow2
    cp base.qcow2 q.qcow2
    M=m.qcow2
    Q=q.qcow2
    both -c before
    qi resize --shrink "$M" "$new"
    qi resize --shrink "$Q" "$new"
    qio "$M" "write -q -P 0x44 $((31 * MiB)) $MiB"
    qio "$Q" "write -q -P 0x44 $((31 * MiB)) $MiB"
    both -c after
    both -a before
    "$QEMU_IMG" info --output=json "$M" >info.json
    [[ "$(<info.json)" =~ \"virtual-size\":\ ([0-9]+) ]]
    assert_eq "resize $new: size after apply" "67108864" "${BASH_REMATCH[1]}"
    REF=before compare_copies "apply-before-$new" all
    both -a after
    REF=after compare_copies "apply-after-$new" all
    cmp_snapshots
    rm -f base.qcow2 m.qcow2 q.qcow2
done

# Messages and exit codes.
qi create -f qcow2 e.qcow2 64M
qi snapshot -c s1 e.qcow2
qi snapshot -c "" e.qcow2
same_as_qemu_err snapshot -a nope e.qcow2
same_as_qemu_err snapshot -q -a nope e.qcow2
same_as_qemu_err snapshot -d nope e.qcow2
same_as_qemu_err snapshot -d 1 e.qcow2 # -d looks up names only
same_as_qemu_err snapshot -l -c x e.qcow2
same_as_qemu_err snapshot -l -l e.qcow2
same_as_qemu_err snapshot -c a -d b e.qcow2
same_as_qemu_err snapshot -c
same_as_qemu_err snapshot -x e.qcow2
same_as_qemu_err snapshot -c x
same_as_qemu_err snapshot -c x e.qcow2 other
same_as_qemu_err snapshot -U -c x e.qcow2
same_as_qemu_err snapshot -U -a s1 e.qcow2
same_as_qemu_err snapshot -U -d s1 e.qcow2
same_as_qemu_err snapshot -c x nonexistent.qcow2
same_as_qemu_err snapshot -l e.qcow2
same_as_qemu_err snapshot -q -l e.qcow2
same_as_qemu_err snapshot -U -l e.qcow2
same_as_qemu_err snapshot e.qcow2
# snapshots need the image file itself: refused with an external data file
qi create -f qcow2 -o data_file=df.raw df.qcow2 1M
for op in -c -a -d; do
    same_as_qemu_err snapshot $op s df.qcow2
done
same_as_qemu_err snapshot -l df.qcow2
# The empty name exists and can be deleted.
M=m.qcow2
Q=q.qcow2
V=errors
cp e.qcow2 "$M"
cp e.qcow2 "$Q"
both -d ""
compare_copies delete-empty-name all
cmp_snapshots

# A refcount that would overflow (1-bit refcounts cannot share a cluster):
# both fail, and the image is still not corrupt (qemu-img leaks there).
qi create -f qcow2 -o refcount_bits=1 r1.qcow2 64M
qio r1.qcow2 "write -q -s rand.bin 0 $MiB"
cp r1.qcow2 r1-q.qcow2
"$QEMU_IMG" snapshot -c s1 r1-q.qcow2 >/dev/null 2>&1
q_rc=$?
m_err=$("$QIMG" snapshot -c s1 r1.qcow2 2>&1)
m_rc=$?
assert_eq "refcount_bits=1: snapshot -c exit code" "$q_rc" "$m_rc"
_checks=$((_checks + 1))
[[ "$m_err" == "qimg: Could not create snapshot 's1': "* ]] ||
    _fail "refcount_bits=1: snapshot -c message: $m_err"
"$QEMU_IMG" check r1.qcow2 >.out 2>&1
rc=$?
_checks=$((_checks + 1))
if [ "$rc" != 0 ] && [ "$rc" != 3 ]; then
    _fail "refcount_bits=1: qemu-img check after the failed snapshot: rc $rc"
    cat .out
fi
assert_eq "refcount_bits=1: no snapshot left" "" "$("$QEMU_IMG" snapshot -l r1.qcow2)"

# Raw images: qemu-img warns about probing first (twice for -a), so does qimg.
truncate -s 1M r.raw
for args in "-c x" "-a x" "-d x"; do
    # shellcheck disable=SC2086
    same_as_qemu_err snapshot $args r.raw
done
same_as_qemu snapshot -l r.raw

finish
