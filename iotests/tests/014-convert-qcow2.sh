#!/bin/bash
# qimg convert -O qcow2 [-c] [-o ...] from raw and qcow2 sources against
# qemu-img convert: the copy is identical to the source (qemu-img compare),
# qemu-img check is clean, the allocation map has the same data/zero
# extents as qemu-img's output (host offsets aside), and with -c the output
# really is compressed: as many compressed clusters as qemu-img's, per
# qemu-img check --output=json.  make test converts the empty source to five
# kinds of target only; QIMG_LONG=1 to all of them.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3

# Sources: a raw file with holes, data, zero runs and unaligned bits; a
# qcow2 with data, zero clusters, compressed clusters and a backing file;
# an empty image; incompressible data.
python3 - <<'PY'
import random
random.seed(20240614)
size = 9 * 1024 * 1024 + 512
with open('src.raw', 'wb') as f:
    f.truncate(size)
    def w(off, data):
        f.seek(off)
        f.write(data)
    w(0, b'\x01' * 512)
    w(70000, b'\x02' * 100)
    blk = bytearray(b'\x03' * (2 * 1024 * 1024))
    for z in [512, 4096, 65536, 1536, 131072]:
        o = random.randrange(0, len(blk) - z)
        blk[o:o + z] = b'\0' * z
    w(1024 * 1024 + 1536, bytes(blk))
    w(5 * 1024 * 1024, bytes(random.getrandbits(8) for _ in range(300000)))
    w(7 * 1024 * 1024, b'\0' * (1024 * 1024))
    w(size - 512, b'\x06' * 512)
PY
: >empty.raw
"$QEMU_IMG" create -q -f qcow2 base.qcow2 8M
"$QEMU_IO" -c 'write -P 0x11 0 8M' base.qcow2 >/dev/null
"$QEMU_IMG" create -q -f qcow2 -b base.qcow2 -F qcow2 src.qcow2 12M
"$QEMU_IO" -c 'write -P 0x22 1M 1M' -c 'write -z 3M 512k' -c 'write -c -P 0x33 5M 64k' \
    -c 'write -c -P 0x34 6M 128k' -c 'discard 7M 64k' -c 'write -P 0x44 11M 4k' \
    src.qcow2 >/dev/null
"$QEMU_IMG" create -q -f qcow2 -o cluster_size=4k small.qcow2 3M
"$QEMU_IO" -c 'write -P 0x55 0 100k' -c 'write -z 200k 8k' -c 'write -P 0 300k 64k' \
    small.qcow2 >/dev/null

# check_convert SRC ARGS...: qemu-img convert ARGS SRC and qimg convert
# ARGS SRC (into c<N>-q.qcow2 and c<N>-m.qcow2): the same exit code and
# messages here; after a success the checks of the header comment, which
# iotests/convert_checks.py runs for every conversion at the end (one
# python3 start instead of ~15 processes a conversion).
: >checks.list
check_convert() {
    local src=$1 desc qrc mrc q m qerr c=0
    shift
    desc="convert $* $src"
    q=c${#checked[@]}-q.qcow2
    m=c${#checked[@]}-m.qcow2
    checked+=("$desc")
    "$QEMU_IMG" convert "$@" "$src" "$q" >q.out 2>&1
    qrc=$?
    "$QIMG" convert "$@" "$src" "$m" >m.out 2>&1
    mrc=$?
    assert_eq "$desc: exit code" "$qrc" "$mrc" || { cat q.out m.out; return 1; }
    as_qimg_err qerr q.out
    assert_eq "$desc: output" "$qerr" "$(<m.out)"
    [ "$qrc" = 0 ] || return 0
    case " $* " in *" -c "*) [ "$src" != empty.raw ] && c=1 ;; esac
    printf '%s\t%s\t%s\t%s\t%s\n' "$desc" "$src" "$q" "$m" "$c" >>checks.list
    expected=$((expected + 6 + c))
}
checked=()
expected=0

for src in src.raw empty.raw src.qcow2 small.qcow2; do
    for args in "-O qcow2" "-O qcow2 -c" "-O qcow2 -c -o compression_type=zstd" \
        "-O qcow2 -o cluster_size=4k" "-O qcow2 -c -o cluster_size=4k,refcount_bits=1" \
        "-O qcow2 -o compat=0.10" "-O qcow2 -c -o compat=0.10" "-O qcow2 -S 0" \
        "-O qcow2 -S 64k" "-O qcow2 -o extended_l2=on" "-O qcow2 -c -o cluster_size=2M" \
        "-O qcow2 -o preallocation=metadata" "-O qcow2 -W -m 4"; do
        # the empty source: with the plain, compressed, v2 and preallocated
        # targets (QIMG_LONG=1: every target)
        case "$src/$args/${QIMG_LONG:-}" in
        empty.raw/"-O qcow2"/ | empty.raw/"-O qcow2 -c"/ | empty.raw/*compat=0.10/ | \
            empty.raw/*preallocation*/ | empty.raw/*/?* | [!e]*) ;;
        *) continue ;;
        esac
        case "$src" in *.raw) set -- -f raw ;; *) set -- ;; esac
        # shellcheck disable=SC2086
        check_convert "$src" "$@" $args
    done
done

# A backing file for the output, and the source's own backing chain.
check_convert src.qcow2 -O qcow2 -B base.qcow2 -F qcow2
check_convert src.qcow2 -O qcow2 -c -B base.qcow2 -F qcow2

# Errors
same_as_qemu_err convert -O qcow2 -c -o preallocation=metadata src.raw out.qcow2
same_as_qemu_err convert -O qcow2 -o compression_type=lz4 src.raw out.qcow2
same_as_qemu_err convert -O qcow2 -o cluster_size=1000 src.raw out.qcow2
same_as_qemu_err convert -O qcow2 -B base.qcow2 src.qcow2 out.qcow2
same_as_qemu_err convert -O raw -B base.qcow2 -F qcow2 src.qcow2 out.raw
same_as_qemu_err convert -O raw -c src.raw out.raw
same_as_qemu_err convert -O qcow2 --target-is-zero src.raw out.qcow2
same_as_qemu_err convert -O qcow2 -B base.qcow2 -F qcow2 --target-is-zero src.qcow2 out.qcow2
same_as_qemu_err convert -O qcow2 -F qcow2 src.raw out.qcow2
rm -f out.qcow2 out.raw

# -B wins over -o backing_file; -o backing_fmt serves as the format
check_convert src.qcow2 -O qcow2 -B base.qcow2 -o backing_file=nonexistent,backing_fmt=qcow2

# --target-is-zero into an existing zeroed target: zeros are not written
for name in qemu-img qimg; do
    tool=$QEMU_IMG
    [ "$name" = qimg ] && tool=$QIMG
    out=tz-$name.qcow2
    "$QEMU_IMG" create -q -f qcow2 "$out" 12M
    assert_rc "$name convert -n --target-is-zero" 0 \
        "$tool" convert -n --target-is-zero -O qcow2 src.qcow2 "$out"
    assert_rc "$name --target-is-zero: same contents" 0 \
        "$QEMU_IMG" compare src.qcow2 "$out"
    assert_rc "$name --target-is-zero: check" 0 "$QEMU_IMG" check "$out"
done
assert_eq "--target-is-zero: map" "$(map_flags tz-qemu-img.qcow2)" "$(map_flags tz-qimg.qcow2)"

# -c into an image with a data file (QEMU's 244): qemu-img 7.2's line and
# exit code, qimg's reason on a second line
"$QEMU_IMG" create -q -f qcow2 -o data_file=df.data df.qcow2 12M
run_both convert -n -c -O qcow2 src.qcow2 df.qcow2
assert_eq "convert -c into a data file image: rc, first line" "$Q_RC ${Q_ERR/qemu-img:/qimg:}" \
    "$M_RC $(head -n 1 <<<"$M_ERR")"

# The checks of every conversion above.
made=0
while IFS= read -r line; do
    case $line in
    ok\ *) made=$((made + 1)) ;;
    FAILED:*) made=$((made + 1)) && _fail "${line#FAILED: }" ;;
    *) echo "$line" ;;
    esac
done < <(python3 "$IOTESTS_DIR/convert_checks.py" <checks.list)
_checks=$((_checks + made))
assert_eq "convert_checks.py: the number of checks" "$expected" "$made"

finish
