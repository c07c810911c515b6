#!/bin/bash
# A zero write that covers only part of a (sub)cluster (qcow2/zero.c
# invariant 1, QEMU's qcow2_co_pwrite_zeroes): the same `write -z` run by
# qemu-io and by qimg io on copies of one image gives the same qemu-img map
# (zero clusters or subclusters where QEMU makes them, data where it writes
# data) and the same contents, over v3, v2, extended L2, 4k clusters and
# backing files that hold data, part data, or zeros.  The whole matrix
# (1080 cases) runs under QIMG_LONG=1; make test runs every 11th case (98:
# each value of each dimension comes up).  The four backing files are made
# once (no case writes them).  Then a backing file shorter than the image
# (QEMU 154) and v2 over a backing file.
# Each case has its own pair of images (q<N>, m<N>: copies of one empty
# image per option set), and each tool runs every case in one process
# (qemu-io's and qimg io's open and close, each step on a fresh open, as
# separate runs would): one qemu-io writes each case's first write (PRE)
# on both copies and the zero write on q<N>, one qimg io the zero writes
# on m<N>; then qemu-img map and compare per case.  (A process start
# costs more CPU than a case's work: one per tool instead of four per
# case halved this test's CPU.)
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io sed

# Per case N: q$N.qcow2 (qemu-io) and m$N.qcow2 (qimg io), its description
# in desc[N]; the tools' commands gathered in q_cmds and m_cmds.
q_cmds=()
m_cmds=()
desc=()
n=0
declare -A made # the empty image of each option set and size, made once

zcase() { # IMG-OPTS PRE-CMD ZERO-CMD BACKING-OPTS BACKING-CMD (b$bi.qcow2)
    local n=${#desc[@]} size=${ZSIZE:-1M} key
    key="${1//b.qcow2/b$bi.qcow2} $size"
    if [ -z "${made[$key]:-}" ]; then
        made[$key]=e${#made[@]}.qcow2
        # shellcheck disable=SC2086
        "$QEMU_IMG" create -q -f qcow2 ${1//b.qcow2/b$bi.qcow2} "${made[$key]}" "$size"
    fi
    cp "${made[$key]}" q$n.qcow2
    cp "${made[$key]}" m$n.qcow2
    if [ -n "$2" ]; then
        q_cmds+=(-c "open q$n.qcow2" -c "$2" -c close -c "open m$n.qcow2" -c "$2" -c close)
    fi
    q_cmds+=(-c "open q$n.qcow2" -c "$3" -c close)
    m_cmds+=(-c "open m$n.qcow2" -c "$3" -c close)
    desc+=("[$1] [$2] $3 (backing [$4] $5)")
}

backings=("|write -P 9 0 1M" "|write -P 9 0 32k" "|write -z 0 1M"
    "-o extended_l2=on|write -P 9 8k 8k")
images=("" "-o extended_l2=on" "-o compat=0.10" "-b b.qcow2 -F qcow2"
    "-b b.qcow2 -F qcow2 -o extended_l2=on" "-o cluster_size=4k")
pres=("" "write -P 1 0 64k" "write -z 0 64k" "write -P 1 4k 4k" "write -z 64k 64k")
zeros=("write -z 1k 2k" "write -z 0 32k" "write -z 32k 32k" "write -z 4k 60k"
    "write -z 60k 8k" "write -z 0 100k" "write -z 10k 200k" "write -z 1000k 24k"
    "write -z 1020k 4k")
bi=0
for bk in "${backings[@]}"; do
    bi=$((bi + 1))
    # shellcheck disable=SC2086
    "$QEMU_IMG" create -q -f qcow2 ${bk%%|*} b$bi.qcow2 1M
    "$QEMU_IO" -c "${bk#*|}" b$bi.qcow2 >/dev/null
    for o in "${images[@]}"; do
        for pre in "${pres[@]}"; do
            for c in "${zeros[@]}"; do
                n=$((n + 1))
                # by default every 11th case (11 is prime to every
                # dimension's size, so each value of each comes up)
                [ -z "${QIMG_LONG:-}" ] && [ $((n % 11)) != 0 ] && continue
                zcase "$o" "$pre" "$c" "${bk%%|*}" "${bk#*|}"
            done
        done
    done
done

# A backing file shorter than the image (QEMU 154): a zero write into the
# part of a cluster past the backing file's end, the cluster's head holding
# backing data, is written as zeros (QEMU allocates the cluster); and v2
# over a backing file writes zeros even where the image reads as zeros.
"$QEMU_IMG" create -q -f qcow2 -o cluster_size=512 b5.qcow2 $((1024 * 1024 + 1024))
"$QEMU_IO" -c "write -P 1 1M 512" b5.qcow2 >/dev/null
bi=5
ZSIZE=$((1024 * 1024 + 2048))
for c in "write -z $((1024 * 1024 + 1024)) 512" "write -z $((1024 * 1024 + 1536)) 512" \
    "write -z $((1024 * 1024 + 512)) 1024"; do
    zcase "-o cluster_size=2k -b b.qcow2 -F qcow2" "" "$c" "-o cluster_size=512" \
        "write -P 1 1M 512"
done
zcase "-o compat=0.10 -b b.qcow2 -F qcow2" "" "write -z 1025k 1k" "-o cluster_size=512" \
    "write -P 1 1M 512"

# The writes: every case's, one process per tool.
"$QEMU_IO" "${q_cmds[@]}" >q.out 2>&1
"$QIMG" io "${m_cmds[@]}" >m.out 2>&1

# The maps (host offsets aside: one sed over all of them) and contents.
for n in "${!desc[@]}"; do
    "$QEMU_IMG" map --output=json q$n.qcow2 >q$n.map 2>&1
    "$QEMU_IMG" map --output=json m$n.qcow2 >m$n.map 2>&1
done
sed -i 's/"offset": [0-9]*/"offset": O/' ./*.map
for n in "${!desc[@]}"; do
    _checks=$((_checks + 1))
    if ! same_bytes q$n.map m$n.map; then
        _fail "${desc[n]}: map"
        diff -u --label qemu-io --label qimg q$n.map m$n.map | head -n 40
    fi
    assert_rc "${desc[n]}: contents" 0 "$QEMU_IMG" compare -q q$n.qcow2 m$n.qcow2
done
finish
