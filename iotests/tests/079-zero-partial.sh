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
. "$(dirname "$0")/../common.sh"
requires qimg qemu-img qemu-io

map_of() { "$QEMU_IMG" map --output=json "$1" | sed 's/"offset": [0-9]*/"offset": O/'; }

zcase() { # IMG-OPTS PRE-CMD ZERO-CMD BACKING-OPTS BACKING-CMD (b$bi.qcow2)
    rm -f q.qcow2 m.qcow2
    # shellcheck disable=SC2086
    "$QEMU_IMG" create -q -f qcow2 ${1//b.qcow2/b$bi.qcow2} q.qcow2 "${ZSIZE:-1M}"
    [ -n "$2" ] && "$QEMU_IO" -c "$2" q.qcow2 >/dev/null
    cp --sparse=never q.qcow2 m.qcow2 # (a sparse copy changes what map reports)
    "$QEMU_IO" -c "$3" q.qcow2 >/dev/null
    "$QIMG" io -c "$3" m.qcow2 >/dev/null
    assert_eq "[$1] [$2] $3 (backing [$4] $5): map" "$(map_of q.qcow2)" "$(map_of m.qcow2)"
    assert_rc "[$1] [$2] $3 (backing [$4] $5): contents" 0 "$QEMU_IMG" compare -q \
        q.qcow2 m.qcow2
}

backings=("|write -P 9 0 1M" "|write -P 9 0 32k" "|write -z 0 1M"
    "-o extended_l2=on|write -P 9 8k 8k")
images=("" "-o extended_l2=on" "-o compat=0.10" "-b b.qcow2 -F qcow2"
    "-b b.qcow2 -F qcow2 -o extended_l2=on" "-o cluster_size=4k")
pres=("" "write -P 1 0 64k" "write -z 0 64k" "write -P 1 4k 4k" "write -z 64k 64k")
zeros=("write -z 1k 2k" "write -z 0 32k" "write -z 32k 32k" "write -z 4k 60k"
    "write -z 60k 8k" "write -z 0 100k" "write -z 10k 200k" "write -z 1000k 24k"
    "write -z 1020k 4k")
n=0
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
finish
