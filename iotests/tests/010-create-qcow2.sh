#!/bin/bash
# qimg create -f qcow2 against qemu-img create -f qcow2, for a matrix of -o
# option sets and sizes: the images must be byte-for-byte identical (cmp),
# qemu-img check clean, "info --output=json" and "map --output=json" equal
# (qemu-img's and qimg's, on both images), and the "Formatting" line the
# same.  Bad option combinations fail with qemu-img's messages and leave no
# file behind.
. "$(dirname "$0")/../common.sh"
requires qimg qemu-img python3

mkdir q m
# The backing images the option sets refer to, in both folders.
for d in q m; do
    "$QEMU_IMG" create -q -f qcow2 "$d/base.qcow2" 64M
    "$QEMU_IMG" create -q -f raw "$d/base.raw" 3M
done

# check_create DESC SIZE ARGS...: create img.qcow2 in q/ with qemu-img and in
# m/ with qimg (same relative names, so even the JSON filenames agree).
check_create() {
    local desc=$1 size=$2 qrc mrc qi mi
    shift 2
    rm -f q/img.qcow2 m/img.qcow2 q/data.raw m/data.raw
    (cd q && "$QEMU_IMG" create -f qcow2 "$@" img.qcow2 $size) >q.out 2>q.err
    qrc=$?
    (cd m && "$QIMG" create -f qcow2 "$@" img.qcow2 $size) >m.out 2>m.err
    mrc=$?
    assert_eq "$desc: exit code" "$qrc" "$mrc" || { cat q.err m.err; return 1; }
    assert_eq "$desc: output" "$(cat q.out)" "$(cat m.out)"
    assert_eq "$desc: errors" "$(sed 's/^qemu-img: /qimg: /' q.err)" "$(cat m.err)"
    [ "$qrc" = 0 ] || return 0

    _checks=$((_checks + 1))
    if ! sparse_cmp q/img.qcow2 m/img.qcow2 >cmp.out; then
        _fail "$desc: image differs from qemu-img's: $(cat cmp.out)"
    fi
    if [ -e q/data.raw ]; then
        _checks=$((_checks + 1))
        sparse_cmp q/data.raw m/data.raw >cmp.out || _fail "$desc: data file differs: $(cat cmp.out)"
        assert_eq "$desc: data file size" "$(stat -c %s q/data.raw)" "$(stat -c %s m/data.raw)"
    fi
    assert_rc "$desc: qemu-img check" 0 bash -c "cd m && \"$QEMU_IMG\" check img.qcow2"

    # With many tables the file system may spend a block more or less on
    # its extent tree: actual-size is compared within 64 KiB there.
    qi=$(cd q && "$QEMU_IMG" info --output=json img.qcow2)
    mi=$(cd m && "$QEMU_IMG" info --output=json img.qcow2)
    case "$*" in
    *preallocation* | *data_file*)
        local qa ma
        qa=$(sed -n 's/.*"actual-size": \([0-9]*\).*/\1/p' <<<"$qi")
        ma=$(sed -n 's/.*"actual-size": \([0-9]*\).*/\1/p' <<<"$mi")
        _checks=$((_checks + 1))
        if [ $((qa - ma)) -gt 65536 ] || [ $((ma - qa)) -gt 65536 ]; then
            _fail "$desc: actual-size $ma, qemu-img's image $qa"
        fi
        qi=$(grep -v actual-size <<<"$qi")
        mi=$(grep -v actual-size <<<"$mi")
        ;;
    esac
    assert_eq "$desc: qemu-img info of both images" "$qi" "$mi"
    assert_eq "$desc: qimg info = qemu-img info" \
        "$(cd m && "$QEMU_IMG" info --output=json img.qcow2)" \
        "$(cd m && "$QIMG" info --output=json img.qcow2)"
    assert_eq "$desc: map" "$(cd q && "$QEMU_IMG" map --output=json img.qcow2)" \
        "$(cd m && "$QEMU_IMG" map --output=json img.qcow2)"
    assert_eq "$desc: qimg map = qemu-img map" \
        "$(cd m && "$QEMU_IMG" map --output=json img.qcow2)" \
        "$(cd m && "$QIMG" map --output=json img.qcow2)"
}

option_sets=(
    ""
    "-o compat=0.10"
    "-o compat=v3"
    "-o cluster_size=512"
    "-o cluster_size=1k,refcount_bits=8"
    "-o cluster_size=4k"
    "-o cluster_size=8k"
    "-o cluster_size=2M"
    "-o refcount_bits=1"
    "-o refcount_bits=2,cluster_size=1k"
    "-o refcount_bits=64"
    "-o lazy_refcounts=on"
    "-o compression_type=zstd"
    "-o extended_l2=on"
    "-o extended_l2=on,cluster_size=16k"
    "-o extended_l2=on,cluster_size=2M,refcount_bits=32"
    "-o preallocation=metadata"
    "-o preallocation=metadata,cluster_size=512"
    "-o preallocation=metadata,extended_l2=on"
    "-o preallocation=metadata,refcount_bits=1,cluster_size=4k"
    "-o preallocation=metadata,compat=0.10,cluster_size=2M"
    "-o preallocation=falloc"
    "-o preallocation=falloc,cluster_size=512"
    "-o preallocation=full,extended_l2=on"
    "-o preallocation=full,refcount_bits=64,cluster_size=1k"
    "-o data_file=data.raw"
    "-o data_file=data.raw,data_file_raw=on"
    "-o data_file=data.raw,preallocation=metadata,cluster_size=4k"
    "-o data_file=data.raw,preallocation=full"
    "-o data_file=data.raw,compression_type=zstd,extended_l2=on"
    "-b base.qcow2 -F qcow2"
    "-b base.raw -F raw -o cluster_size=512"
    "-b base.qcow2 -F qcow2 -o compat=0.10"
    "-b base.qcow2 -F qcow2 -o extended_l2=on,preallocation=metadata"
    "-b base.qcow2 -F qcow2 -o data_file=data.raw"
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

for opts in "${option_sets[@]}"; do
    for size in "${sizes[@]}"; do
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
for opts in "${bad_sets[@]}"; do
    for size in 64M 129G; do
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
