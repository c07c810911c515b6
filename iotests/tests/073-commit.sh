#!/bin/bash
# qimg commit against qemu-img commit on copies of the same chains: every
# file's contents, qemu-img's map of each (no host offsets), qemu-img
# check, messages and exit codes:
#  - into the backing file (emptied top), -d (kept top), -b deeper in the
#    chain (implies -d; the layers in between committed too), a raw base,
#    a base smaller than the top (grown), zero clusters, v2, 4 KiB
#    clusters, extended L2, -q, -p, -t none, -r (rate limit);
#  - refusals: no backing file, -b not in the chain, a bad -r, no file;
#  - power loss during a commit (the crash-state explorer): every state of
#    the base and the top together reads as the chain did (commit.c fact 3).
. "${0%/*}/../common.sh"
. "$IOTESTS_DIR/crash/lib.sh"
requires qimg qemu-img qemu-io python3

# commit_both DIR TOP ARGS...: commit copies of DIR in q/ (qemu-img) and
# m/ (qimg), then compare every file.
commit_both() {
    local dir=$1 top=$2
    shift 2
    rm -rf q m
    cp -r "$dir" q
    cp -r "$dir" m
    (cd q && "$QEMU_IMG" commit "$@" "$top" >../q.out 2>&1)
    local qrc=$?
    (cd m && "$QIMG" commit "$@" "$top" >../m.out 2>&1)
    local mrc=$?
    sed -i -e 's/^qemu-img: /qimg: /' -e "s/'qemu-img --help'/'qimg --help'/" q.out
    assert_eq "commit $* $top: exit code" "$qrc" "$mrc"
    [[ " $* " == *" -p "* ]] ||
        assert_eq "commit $* $top: messages" "$(cat q.out)" "$(cat m.out)"
    [ "$qrc" = 0 ] || return 0
    for f in q/*; do
        f=${f#q/}
        local fmt=qcow2
        [[ "$f" == *.raw ]] && fmt=raw
        assert_rc "commit $* $top: $f's contents" 0 \
            "$QEMU_IMG" compare -q -f "$fmt" -F "$fmt" "q/$f" "m/$f"
        [ "$fmt" = qcow2 ] || continue
        assert_eq "commit $* $top: $f's map" "$(cd q && map_flags "$f")" \
            "$(cd m && map_flags "$f")"
        assert_rc "commit $* $top: $f check" 0 "$QEMU_IMG" check -q "m/$f"
    done
}

# (make test: v3 64k and 4k clusters; QIMG_LONG=1 adds v2 and extended L2)
configs=("" "cluster_size=4k")
[ -n "${QIMG_LONG:-}" ] && configs=("" "compat=0.10" "cluster_size=4k" "extended_l2=on")
for o in "${configs[@]}"; do
    rm -rf c
    mkdir c
    (
        cd c || exit 1
        mk_qcow2 b0.qcow2 8M "$o" 'write -P 7 0 4M'
        mk_qcow2 b1.qcow2 8M "$o,backing_file=b0.qcow2,backing_fmt=qcow2" 'write -P 1 1M 1M' \
            'write -z 3M 64k'
        mk_qcow2 t.qcow2 10M "$o,backing_file=b1.qcow2,backing_fmt=qcow2" 'write -P 2 1536k 1M' \
            'write -z 100k 8k' 'write -P 3 9M 100k' 'write -P 4 3M 4k'
    )
    echo "# options: ${o:-default}"
    commit_both c t.qcow2
    commit_both c t.qcow2 -b b0.qcow2
    if [ -z "$o" ]; then
        commit_both c t.qcow2 -d
        commit_both c t.qcow2 -q -t none
        commit_both c t.qcow2 -p -r 100M
        commit_both c b1.qcow2
    fi
done
# a raw base
rm -rf c
mkdir c
head -c 3000000 /dev/urandom >c/r.raw
(cd c && mk_qcow2 t.qcow2 4M "backing_file=r.raw,backing_fmt=raw" 'write -P 5 1M 1M' 'write -z 0 64k')
commit_both c t.qcow2

# refusals
commit_both c r.raw
commit_both c t.qcow2 -b nosuch.qcow2
commit_both c t.qcow2 -r x
expect_error "no file name" commit
expect_error "two file names" commit c/t.qcow2 c/t.qcow2

# power loss: the base and the top in one log (qimg_image_open_layer opens
# the base through the top's recording node)
d=$SCRATCH/crash
mkdir -p "$d"
(
    cd "$d" || exit 1
    mk_qcow2 lower.qcow2 4M "" 'write -P 1 0 2M'
    mk_qcow2 img.qcow2 4M "backing_file=lower.qcow2,backing_fmt=qcow2" 'write -P 2 512k 1M' \
        'write -z 3M 64k' 'write -P 3 2M 4k'
    "$QEMU_IMG" convert -O raw img.qcow2 A0.raw
)
cp "$d/img.qcow2" "$d/img0.qcow2"
cp "$d/lower.qcow2" "$d/lower0.qcow2"
if (cd "$d" && "$QIMG" commit "record:$d/log:img.qcow2" >op.out 2>&1); then
    assert_rc "commit recorded: the base holds the chain's contents" 0 \
        "$QEMU_IMG" compare "$d/A0.raw" "$d/lower.qcow2"
    crash_explore qimg-commit --log "$d/log" --base "$d/img.qcow2=$d/img0.qcow2" \
        --base "$d/lower.qcow2=$d/lower0.qcow2" --image "$d/img.qcow2" \
        --expect-raw "$d/A0.raw"
else
    _fail "commit on the recording node failed: $(cat "$d/op.out")"
fi
crash_summary

# -b names the base as QEMU finds it (QEMU iotest 020): relative to the
# folder of the layer above it or absolute; a path relative to the working
# directory that is not also one from the layer's folder is not found
for b in t.mid subdir/t.mid "$PWD/subdir/t.mid"; do
    rm -rf subdir && mkdir subdir
    qi create -q -f qcow2 subdir/t.base 1M
    qi create -q -f qcow2 -b t.base -F qcow2 subdir/t.mid
    qi create -q -f qcow2 -b t.mid -F qcow2 subdir/t
    "$QEMU_IO" -c 'write -P 9 0 64k' subdir/t >/dev/null || exit 1
    same_as_qemu_err commit -b "$b" subdir/t
done

finish
