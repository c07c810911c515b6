#!/bin/bash
# qimg create -f qcow2 against qemu-img create -f qcow2, for a matrix of -o
# option sets and sizes: the images must be byte-for-byte identical (cmp),
# allocate as much of the host file (stat), qemu-img check clean, qimg's
# "info --output=json" and "map --output=json" equal qemu-img's on qimg's
# image, and the "Formatting" line the same.  (qemu-img's info and map of
# its own image are run only where identical bytes do not imply identical
# output: when the bytes differ, and map where the host file's holes show
# through, with preallocation or a data file; qemu-img check only where
# the bytes differ: of the same bytes it says what it says of its own
# image.)  Bad option combinations
# fail with qemu-img's messages and leave no file behind.
# make test: each option set at the sizes listed with it (48 images), the
# bad sets at 64M and, where they name a cluster size, 129G.  QIMG_LONG=1:
# every option set at every size (0 100000 64M 3G 1M 12345k 1G 10G 100G),
# every bad set at both sizes, and the 128G..2P images.
. "${0%/*}/../common.sh"
requires qimg qemu-img python3

mkdir q m
# The backing images the option sets refer to, in both folders.
for d in q m; do
    "$QEMU_IMG" create -q -f qcow2 "$d/base.qcow2" 64M
    "$QEMU_IMG" create -q -f raw "$d/base.raw" 3M
done

# check_create DESC SIZE ARGS...: create img.qcow2 in q/ with qemu-img and in
# m/ with qimg (same relative names, so even the JSON filenames agree).
# data_bytes FILE: the bytes of FILE's data extents (SEEK_DATA to
# SEEK_HOLE), without the blocks the file system keeps its extent tree in
data_bytes() {
    python3 -c '
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
end, off, total = os.fstat(fd).st_size, 0, 0
while off < end:
    try:
        data = os.lseek(fd, off, os.SEEK_DATA)
    except OSError:
        break
    off = os.lseek(fd, data, os.SEEK_HOLE)
    total += off - data
print(total)' "$1"
}

# in_dir VAR DIR CMD...: VAR = the stdout of CMD run in DIR (trailing
# newlines dropped, as $(...)); stderr to the test's.  By cd and the
# shell's read rather than $(cd DIR && CMD): check_create runs ~90 times
# and a process costs ~10 ms of CPU here, as much as a create of qemu-img.
in_dir() {
    local _v=$1 _d=$2
    shift 2
    cd "$_d" || exit 1
    "$@" >../.in_dir.out
    cd .. || exit 1
    slurp "$_v" .in_dir.out
}
# slurp VAR FILE: VAR = FILE's text, trailing newlines dropped (no NUL).
slurp() {
    local _t=
    IFS= read -r -d '' _t <"$2"
    while [[ "$_t" == *$'\n' ]]; do _t=${_t%$'\n'}; done
    printf -v "$1" '%s' "$_t"
}

check_create() {
    local desc=$1 size=$2 qrc mrc qi mi qo mo
    shift 2
    rm -f q/img.qcow2 m/img.qcow2 q/data.raw m/data.raw
    cd q || exit 1
    "$QEMU_IMG" create -f qcow2 "$@" img.qcow2 $size >../q.out 2>../q.err
    qrc=$?
    cd ../m || exit 1
    "$QIMG" create -f qcow2 "$@" img.qcow2 $size >../m.out 2>../m.err
    mrc=$?
    cd .. || exit 1
    assert_eq "$desc: exit code" "$qrc" "$mrc" || { cat q.err m.err; return 1; }
    slurp qo q.out
    slurp mo m.out
    assert_eq "$desc: output" "$qo" "$mo"
    as_qimg_err qo q.err
    slurp mo m.err
    # (as_qimg_err reads 'qemu-img --help' as 'qimg --help' too: no
    # create error names it)
    assert_eq "$desc: errors" "$qo" "$mo"
    [ "$qrc" = 0 ] || return 0

    # byte for byte (cmp reads a small file faster than sparse_cmp starts)
    _checks=$((_checks + 1))
    local same=yes
    if ! same_bytes q/img.qcow2 m/img.qcow2 >cmp.out; then
        _fail "$desc: image differs from qemu-img's: $(cat cmp.out)"
        same=no
    fi
    if [ -e q/data.raw ]; then
        _checks=$((_checks + 1))
        same_bytes q/data.raw m/data.raw >cmp.out || {
            _fail "$desc: data file differs: $(cat cmp.out)"
            same=no
        }
        assert_eq "$desc: data file size" "$(stat -c %s q/data.raw)" "$(stat -c %s m/data.raw)"
    fi
    # (the same bytes as qemu-img's image, data file too: check would say
    # of them what it says of qemu-img's own image, nothing of qimg's)
    [ $same = yes ] || assert_rc "$desc: qemu-img check" 0 check_m

    # What the bytes do not show: how much of each file is allocated
    # (qemu-img info's actual-size).  With many tables the file system may
    # spend a block more or less on its extent tree: compared within 64 KiB
    # where there is preallocation or a data file, else exactly -- and
    # where the blocks differ, the data extents (SEEK_DATA/SEEK_HOLE, no
    # extent tree) are compared instead: the same bytes written as ext4
    # laid them out took 4 KiB more, or less, in either tool's file with
    # 512-byte clusters at 100G and 128G (QIMG_LONG=1).
    local f slack=0 qa ma
    case "$*" in *preallocation* | *data_file*) slack=128 ;; esac
    for f in img.qcow2 data.raw; do
        [ -e "q/$f" ] || continue
        # (same_bytes just read both sizes, and the blocks, of img.qcow2)
        if [ $f = img.qcow2 ]; then
            qa=$SB_QBLOCKS ma=$SB_MBLOCKS
        else
            stat -c %b "q/$f" "m/$f" >.blocks
            { read -r qa && read -r ma; } <.blocks
        fi
        _checks=$((_checks + 1))
        if [ $((qa - ma)) -gt $slack ] || [ $((ma - qa)) -gt $slack ]; then
            if [ $slack = 0 ] && [ "$(data_bytes "q/$f")" = "$(data_bytes "m/$f")" ]; then
                continue # the file system's own blocks, not the data's
            fi
            _fail "$desc: $f allocates $((ma * 512)) bytes, qemu-img's $((qa * 512))"
        fi
    done

    # Same bytes and names, same allocation: qemu-img info says the same of
    # both images, and so does qemu-img map unless the host file's holes
    # show through (preallocated clusters, a data file): only then (or when
    # the bytes differ) are qemu-img's own image's info and map run.
    local qi mi mm m2
    in_dir mi m "$QEMU_IMG" info --output=json img.qcow2
    if [ $same = no ]; then
        in_dir qi q "$QEMU_IMG" info --output=json img.qcow2
        assert_eq "$desc: qemu-img info of both images" "$(grep -v actual-size <<<"$qi")" \
            "$(grep -v actual-size <<<"$mi")"
    fi
    in_dir m2 m "$QIMG" info --output=json img.qcow2
    assert_eq "$desc: qimg info = qemu-img info" "$mi" "$m2"
    in_dir mm m "$QEMU_IMG" map --output=json img.qcow2
    case "$same/$*" in
    no/* | */*preallocation* | */*data_file*)
        in_dir qi q "$QEMU_IMG" map --output=json img.qcow2
        assert_eq "$desc: map" "$qi" "$mm"
        ;;
    esac
    in_dir m2 m "$QIMG" map --output=json img.qcow2
    assert_eq "$desc: qimg map = qemu-img map" "$mm" "$m2"
}

# check_m: qemu-img check on qimg's image, in m/ (where a data file's
# relative name is found).
check_m() {
    cd m || exit 1
    "$QEMU_IMG" check img.qcow2
    local rc=$?
    cd .. || exit 1
    return $rc
}

# same_bytes A B: cmp -s for files up to 64 MiB, sparse_cmp beyond.
# SB_QBLOCKS, SB_MBLOCKS: the blocks (stat %b) of A and B, from the same
# stat.
same_bytes() {
    local qs ms
    stat -c '%s %b' "$1" "$2" >.sizes
    { read -r qs SB_QBLOCKS && read -r ms SB_MBLOCKS; } <.sizes
    if [ "$qs" -le $((64 << 20)) ] && [ "$ms" -le $((64 << 20)) ]; then
        cmp "$1" "$2"
    else
        sparse_cmp "$1" "$2"
    fi
}

# "OPTS|SIZES": make test creates each option set at the SIZES listed with
# it (chosen so that each set meets the sizes where its layout changes:
# several L2 tables and refcount blocks at 3G, none at 0, an unaligned size
# at 100000, and each size meets every kind of set); QIMG_LONG=1 creates
# every set at every size of $sizes (less the too_slow ones).
option_sets=(
    "|0 100000 64M 3G"
    "-o compat=0.10|0 3G"
    "-o compat=v3|64M"
    "-o cluster_size=512|100000 3G"
    "-o cluster_size=1k,refcount_bits=8|64M"
    "-o cluster_size=4k|3G"
    "-o cluster_size=8k|100000"
    "-o cluster_size=2M|0 3G"
    "-o refcount_bits=1|3G"
    "-o refcount_bits=2,cluster_size=1k|64M 3G"
    "-o refcount_bits=64|100000 3G"
    "-o lazy_refcounts=on|64M"
    "-o compression_type=zstd|64M"
    "-o extended_l2=on|3G"
    "-o extended_l2=on,cluster_size=16k|100000"
    "-o extended_l2=on,cluster_size=2M,refcount_bits=32|0 64M"
    "-o preallocation=metadata|100000 3G"
    "-o preallocation=metadata,cluster_size=512|100000"
    "-o preallocation=metadata,extended_l2=on|64M"
    "-o preallocation=metadata,refcount_bits=1,cluster_size=4k|64M"
    "-o preallocation=metadata,compat=0.10,cluster_size=2M|3G"
    "-o preallocation=falloc|64M"
    "-o preallocation=falloc,cluster_size=512|100000"
    "-o preallocation=full,extended_l2=on|100000"
    "-o preallocation=full,refcount_bits=64,cluster_size=1k|100000"
    "-o data_file=data.raw|0 64M"
    "-o data_file=data.raw,data_file_raw=on|100000 64M"
    "-o data_file=data.raw,preallocation=metadata,cluster_size=4k|64M"
    "-o data_file=data.raw,preallocation=full|100000"
    "-o data_file=data.raw,compression_type=zstd,extended_l2=on|3G"
    "-b base.qcow2 -F qcow2|64M 3G"
    "-b base.raw -F raw -o cluster_size=512|100000"
    "-b base.qcow2 -F qcow2 -o compat=0.10|0"
    "-b base.qcow2 -F qcow2 -o extended_l2=on,preallocation=metadata|64M"
    "-b base.qcow2 -F qcow2 -o data_file=data.raw|64M"
)
sizes=(0 100000 64M 3G)
if [ -n "${QIMG_LONG:-}" ]; then
    sizes+=(1M 12345k 1G 10G 100G)
fi

# too_slow OPTS SIZE: qemu-img would take long (small clusters with
# preallocation) or write gigabytes (full).
too_slow() {
    local big=no huge=no
    case "$2" in 1G | 3G | 10G | 100G) big=yes ;; esac
    case "$2" in 10G | 100G) huge=yes ;; esac
    case "$1" in
    *preallocation*) [ $huge = yes ] && return 0 ;;
    esac
    case "$1" in
    *full*) [ $big = yes ] && return 0 ;;
    esac
    case "$1" in
    *preallocation*cluster_size=512* | *preallocation*cluster_size=1k* | \
        *cluster_size=512*preallocation* | *cluster_size=1k*preallocation*)
        [ $big = yes ] || [ "$2" = 64M ] && return 0
        ;;
    esac
    case "$1" in
    *preallocation*cluster_size=4k* | *cluster_size=4k*preallocation*)
        [ $big = yes ] && return 0
        ;;
    esac
    return 1
}

for set in "${option_sets[@]}"; do
    opts=${set%|*}
    set_sizes=${set#*|}
    [ -n "${QIMG_LONG:-}" ] && set_sizes=${sizes[*]}
    for size in $set_sizes; do
        too_slow "$opts" "$size" && continue
        # shellcheck disable=SC2086
        check_create "create $opts $size" "$size" $opts
    done
done

# Size taken from the backing image.
check_create "size from backing" "" -b base.qcow2 -F qcow2
check_create "size from raw backing" "" -b base.raw -F raw -o cluster_size=4k
# Large images whose refcount structures grow while the L1 table is made.
check_create "512-byte clusters, 20G" 20G -o cluster_size=512
check_create "1k clusters, 1-bit refcounts" 100G -o cluster_size=1k,refcount_bits=1
if [ -n "${QIMG_LONG:-}" ]; then
    check_create "512-byte clusters, 128G" 128G -o cluster_size=512
    check_create "512-byte clusters, 1-bit refcounts" 100G -o cluster_size=512,refcount_bits=1
    # (qemu-img map takes seconds on these)
    check_create "1 PiB" 1P
    check_create "2 PiB, 64-bit refcounts" 2P -o refcount_bits=64
fi

# Bad combinations: qemu-img's message, no file left behind.
bad_sets=(
    "-o compat=0.11"
    "-o compat=0.10,lazy_refcounts=on"
    "-o compat=0.10,refcount_bits=8"
    "-o refcount_bits=3"
    "-o refcount_bits=128"
    "-o refcount_bits=0"
    "-o cluster_size=1000"
    "-o cluster_size=256"
    "-o cluster_size=4M"
    "-o extended_l2=on,cluster_size=8k"
    "-o compat=0.10,extended_l2=on"
    "-o compression_type=lz4"
    "-o compat=0.10,compression_type=zstd"
    "-o data_file_raw=on"
    "-o data_file=data.raw,compat=0.10"
    "-o preallocation=foo"
    "-o preallocation=metadata -b base.qcow2 -F qcow2"
    "-o preallocation=falloc -b base.qcow2 -F qcow2"
    "-o backing_fmt=qcow2"
    "-o data_file=data.raw,data_file_raw=on -b base.qcow2 -F qcow2"
    "-o compat=0.11,preallocation=foo,compression_type=x"
    "-o preallocation=foo,compression_type=x"
    "-u -b base.qcow2 -F foo"
    "-u -b base.qcow2 -F raw -o preallocation=foo"
    "-o cluster_size=3000,lazy_refcounts=on,compat=0.10"
    "-o data_file=nodir/data.raw"
    "-o cluster_size=512 -u -b $(printf 'x%.0s' {1..400}) -F raw"
    "-o cluster_size=512,data_file=$(printf 'd%.0s' {1..450})"
    "-u -b $(printf 'x%.0s' {1..1100}) -F raw"
)
# Each set at 64M, and at 129G (too large for 512-byte clusters: which
# error comes first) where it names a cluster size; QIMG_LONG=1: each at
# both.
for opts in "${bad_sets[@]}"; do
    bad_sizes=64M
    case "$opts/${QIMG_LONG:-}" in *cluster_size* | */?*) bad_sizes="64M 129G" ;; esac
    for size in $bad_sizes; do
        # shellcheck disable=SC2086
        check_create "bad: ${opts:0:60} $size" $size $opts
        _checks=$((_checks + 1))
        if [ -e m/img.qcow2 ] || [ -e m/data.raw ]; then
            _fail "bad: $opts: qimg left a file behind"
        fi
    done
done
check_create "too large for 512-byte clusters" 129G -o cluster_size=512
check_create "too large" 3P
# An existing file is removed by a failing create, as by qemu-img.
echo old >q/img.qcow2
echo old >m/img.qcow2
(cd q && "$QEMU_IMG" create -q -f qcow2 -o compat=0.10,lazy_refcounts=on img.qcow2 1M) 2>/dev/null
(cd m && "$QIMG" create -q -f qcow2 -o compat=0.10,lazy_refcounts=on img.qcow2 1M) 2>/dev/null
assert_eq "failed create over an existing file" "$([ -e q/img.qcow2 ] && echo kept)" \
    "$([ -e m/img.qcow2 ] && echo kept)"

finish
