#!/bin/bash
# qimg resize against qemu-img resize: grow and shrink (absolute and
# relative sizes, --shrink, --preallocation), on qcow2 images of several
# kinds and on raw files; the same output, exit code and messages, the same
# virtual size and contents afterwards (qemu-img compare), and qemu-img
# check clean on qimg's image.  make test runs the usage errors (bad sizes
# and options, refused whatever the image) on the default qcow2 kind and
# raw only; QIMG_LONG=1 on every kind of image.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

# resize_both DESC ARGS... (ARGS name the image "IMG"): qemu-img resize on
# img.q, qimg resize on img.m.
resize_both() {
    local desc=$1 qrc mrc a qargs=() margs=()
    shift
    for a in "$@"; do
        qargs+=("${a//IMG/img.q}")
        margs+=("${a//IMG/img.m}")
    done
    "$QEMU_IMG" resize "${qargs[@]}" >q.out 2>q.err
    qrc=$?
    "$QIMG" resize "${margs[@]}" >m.out 2>m.err
    mrc=$?
    # (the outputs read and rewritten by the shell's builtins, not cat,
    # sed and grep: ~8 ms of CPU per process, five per step)
    local qo mo qe me
    qo=$(<q.out) mo=$(<m.out)
    as_qimg_err qe q.err
    me=$(<m.err)
    assert_eq "$desc: exit code" "$qrc" "$mrc"
    assert_eq "$desc: output" "$qo" "$mo"
    assert_eq "$desc: messages" "${qe//img.q/IMG}" "${me//img.m/IMG}"
    # one qemu-img compare says both: it warns "Image size mismatch!" when
    # the virtual sizes differ
    "$QEMU_IMG" compare -f "$fmt" -F "$fmt" img.q img.m >cmp.out 2>&1
    local crc=$? cmp_out line mismatch=
    cmp_out=$(<cmp.out)
    while IFS= read -r line; do
        [[ "${line,,}" != *"size mismatch"* ]] || mismatch+=${mismatch:+$'\n'}$line
    done <<<"$cmp_out"
    assert_eq "$desc: virtual size" "" "$mismatch"
    assert_eq "$desc: contents" "0 Images are identical." "$crc $cmp_out"
    if [ "$fmt" = qcow2 ]; then
        assert_rc "$desc: qemu-img check" 0 "$QEMU_IMG" check img.m
    fi
}

# steps: "DESC|ARGS"; a leading ! marks a usage error (see run_steps)
steps=(
    "grow relative|IMG +1M"
    "grow absolute|IMG 80M"
    "same size|IMG 80M"
    "shrink without --shrink|IMG -1M"
    "shrink|--shrink IMG -1M"
    "shrink absolute|--shrink IMG 70M"
    "shrink unaligned|--shrink IMG 1000000"
    "to zero|IMG 0"
    "!below zero|IMG -100M"
    "!bad size|IMG abc"
    "!bad suffix|IMG 1.5x"
    "!overflow|IMG 9E"
    "quiet|-q IMG +64k"
    "!preallocation when not growing|--preallocation=falloc IMG 70M"
    "!bad preallocation|--preallocation=foo IMG +1M"
    "grow with metadata|--preallocation=metadata IMG +3M"
    "grow with falloc|--preallocation=falloc IMG +5M"
    "grow with full|--preallocation=full IMG +2M"
    "grow unaligned|IMG +1000"
    "grow past a L2 table|IMG 1100M"
    "shrink over data|--shrink IMG 50M"
    "grow back|IMG 96M"
    "!missing size|IMG"
    "!extra argument|IMG 1M 2M"
    "!bad option|-x IMG 1M"
)

# run_steps CREATE-ARGS...: a fresh image with data in it, then every step
run_steps() {
    local s desc args
    rm -f img.q img.m
    # shellcheck disable=SC2086
    "$QEMU_IMG" create -q -f "$fmt" "$@" img.q 64M
    "$QEMU_IO" -f "$fmt" -c 'write -P 1 0 1M' -c 'write -P 2 40M 3M' -c 'write -P 3 63M 1M' \
        img.q >/dev/null
    cp img.q img.m
    for s in "${steps[@]}"; do
        # (qemu-img takes a minute to shrink 1 GiB of 512-byte clusters)
        case "$*/$s" in *cluster_size=512*/grow\ past*) continue ;; esac
        # (usage errors, refused before the image is touched: on the
        # first qcow2 kind and raw; QIMG_LONG=1: on every kind)
        case "$s/$fmt $*/${QIMG_LONG:-}" in
        !*/qcow2\ ?*/) continue ;;
        esac
        s=${s#!}
        desc="$fmt $* ${s%%|*}"
        read -ra args <<<"${s#*|}"
        if [ "$fmt" = raw ]; then
            args=(-f raw "${args[@]}")
        fi
        resize_both "$desc" "${args[@]}"
    done
}

fmt=qcow2
run_steps
run_steps -o compat=0.10
run_steps -o cluster_size=512,refcount_bits=1
run_steps -o extended_l2=on
run_steps -o cluster_size=2M,lazy_refcounts=on
fmt=raw
run_steps

# v2 images with snapshots cannot be resized; v3 ones can
fmt=qcow2
for compat in 0.10 1.1; do
    rm -f img.q img.m
    "$QEMU_IMG" create -q -f qcow2 -o compat=$compat img.q 64M
    "$QEMU_IMG" snapshot -c snap img.q
    cp img.q img.m
    resize_both "compat $compat with a snapshot" IMG +16M
    resize_both "compat $compat with a snapshot, shrink" --shrink IMG 32M
done
fmt=qcow2
resize_both "missing image" nonexistent.qcow2 1M
resize_both "no arguments"

finish
