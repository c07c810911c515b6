#!/bin/bash
# qimg convert with several sources concatenates them as qemu-img 7.2 does
# (tools/convert.c fact 9, qimg/copy.h rule 6; issue 29, QEMU's 122):
# against qemu-img convert of the same sources, raw and qcow2 sources of
# odd sizes (rounded up to 512 bytes each), with holes, zero clusters and a
# backing file, into raw and qcow2 targets, with -c, -S 0, -m 1, -W, -n
# and --target-is-zero: the same size, contents (qemu-img compare), the
# same allocation map (host offsets aside) and a clean check; -p prints
# qemu-img's progress; the refusals with qemu-img's words and exit code.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3

# a.raw: 1000 bytes (rounded up to 1024); d.raw: 1537 bytes, a hole then
# three bytes; b.qcow2: data, a zero run, a hole, data; c.qcow2: a backing
# file showing through around its own data; e.qcow2: 1 KiB clusters, an
# odd size, data in its first and last clusters
head -c 1000 /dev/urandom >a.raw
python3 -c '
with open("d.raw", "wb") as f:
    f.truncate(1537)
    f.seek(1200)
    f.write(b"xyz")'
mk_qcow2 b.qcow2 3M "" 'write -P 0x11 64k 100k' 'write -z 1M 512k' 'write -P 0x22 2560k 4k'
mk_qcow2 base.qcow2 2M "" 'write -P 0x33 0 2M'
mk_qcow2 c.qcow2 2M "backing_file=base.qcow2,backing_fmt=qcow2" 'write -P 0x44 512k 64k' \
    'write -z 1M 64k'
mk_qcow2 e.qcow2 1023k "cluster_size=1024" 'write -P 0x55 0 1k' 'write -P 0x66 1022k 1k'
SRCS=(a.raw b.qcow2 c.qcow2 d.raw e.qcow2)

# compressed IMG: the compressed clusters qemu-img check counts in IMG
compressed() {
    "$QEMU_IMG" check --output=json "$1" | sed -n 's/.*"compressed-clusters": \([0-9]*\).*/\1/p'
}

# same_copy DESC FMT: q.FMT (qemu-img's) and m.FMT (qimg's) have the same
# size (compressed: as many compressed clusters; zlib's output differs),
# contents, allocation map, and m.FMT checks clean (qcow2)
same_copy() {
    if [[ "$1" = *-c* ]]; then
        assert_eq "$1: compressed clusters" "$(compressed "q.$2")" "$(compressed "m.$2")"
    else
        assert_eq "$1: size" "$(stat -c %s "q.$2")" "$(stat -c %s "m.$2")"
    fi
    assert_eq "$1: virtual size" "$("$QEMU_IMG" info -f "$2" "q.$2" | grep 'virtual size')" \
        "$("$QEMU_IMG" info -f "$2" "m.$2" | grep 'virtual size')"
    assert_rc "$1: contents" 0 "$QEMU_IMG" compare -q -f "$2" -F "$2" "q.$2" "m.$2"
    assert_eq "$1: map" "$(map_flags "q.$2" "$2")" "$(map_flags "m.$2" "$2")"
    if [ "$2" = qcow2 ]; then
        assert_rc "$1: check" 0 "$QEMU_IMG" check -q "m.$2"
    fi
}

# both FMT ARGS...: convert the sources with ARGS into q.FMT and m.FMT
both() {
    local fmt=$1
    shift
    rm -f "q.$fmt" "m.$fmt"
    assert_rc "qemu-img convert $*" 0 "$QEMU_IMG" convert -O "$fmt" "$@" "${SRCS[@]}" "q.$fmt"
    assert_rc "qimg convert $*" 0 "$QIMG" convert -O "$fmt" "$@" "${SRCS[@]}" "m.$fmt"
}

for fmt in raw qcow2; do
    for opts in "" "-S 0" "-m 1" "-W" "-c" "-c -S 0"; do
        [ "$fmt" = raw ] && [[ "$opts" = -c* ]] && continue
        # -W into qcow2 fragments qemu-img's output (host offsets differ,
        # which map_flags ignores)
        both "$fmt" $opts
        same_copy "-O $fmt $opts" "$fmt"
    done
done

# each source's own part: the concatenation at source i's offset holds it
off=0
for s in "${SRCS[@]}"; do
    fmt=raw
    [[ "$s" = *.qcow2 ]] && fmt=qcow2
    size=$("$QEMU_IMG" info -f "$fmt" --output=json "$s" |
        sed -n 's/.*"virtual-size": \([0-9]*\).*/\1/p')
    "$QEMU_IMG" convert -f "$fmt" -O raw "$s" part.raw
    assert_rc "$s at $off" 0 cmp -n "$size" part.raw m.raw "0" "$off"
    off=$((off + size))
done
assert_eq "sizes add up" "$off" "$(stat -c %s m.raw)"

# -n into a larger target, with and without --target-is-zero
for fmt in raw qcow2; do
    for opts in "" "--target-is-zero"; do
        rm -f "q.$fmt" "m.$fmt"
        qi create -q -f "$fmt" "q.$fmt" 8M
        qi create -q -f "$fmt" "m.$fmt" 8M
        assert_rc "qemu-img -n $opts" 0 "$QEMU_IMG" convert -n $opts -O "$fmt" \
            "${SRCS[@]}" "q.$fmt"
        assert_rc "qimg -n $opts" 0 "$QIMG" convert -n $opts -O "$fmt" "${SRCS[@]}" "m.$fmt"
        same_copy "-n $opts -O $fmt" "$fmt"
    done
done
qi create -q -f qcow2 small.qcow2 5M
same_as_qemu_err convert -n -O qcow2 "${SRCS[@]}" small.qcow2

# -p: qemu-img's progress lines over all the sources
rm -f q.qcow2 m.qcow2
"$QEMU_IMG" convert -p -O qcow2 "${SRCS[@]}" q.qcow2 >q.prog
"$QIMG" convert -p -O qcow2 "${SRCS[@]}" m.qcow2 >m.prog
assert_eq "-p" "$(tr '\r' '\n' <q.prog)" "$(tr '\r' '\n' <m.prog)"

# -l: a snapshot name is refused with several sources; snapshot.name= is
# loaded into the first source only
cp b.qcow2 snap.qcow2
qio snap.qcow2 'write -P 0x77 0 64k'
qi snapshot -c s1 snap.qcow2
qio snap.qcow2 'write -P 0x78 0 64k'
same_as_qemu_err convert -O qcow2 -l s1 snap.qcow2 snap.qcow2 t.qcow2
rm -f q.qcow2 m.qcow2
assert_rc "qemu-img -l snapshot.name=" 0 "$QEMU_IMG" convert -O qcow2 -l snapshot.name=s1 \
    snap.qcow2 snap.qcow2 q.qcow2
assert_rc "qimg -l snapshot.name=" 0 "$QIMG" convert -O qcow2 -l snapshot.name=s1 \
    snap.qcow2 snap.qcow2 m.qcow2
same_copy "-l snapshot.name=" qcow2

# refusals, in qemu-img's order and words
same_as_qemu_err convert -O qcow2 -B base.qcow2 -F qcow2 a.raw b.qcow2 t.qcow2
same_as_qemu_err convert -O qcow2 -o backing_file=base.qcow2,backing_fmt=qcow2 a.raw \
    b.qcow2 t.qcow2
same_as_qemu_err convert -O qcow2 -B base.qcow2 a.raw b.qcow2 t.qcow2
qi create -q -f qcow2 t.qcow2 8M
same_as_qemu_err convert -n -O qcow2 -B base.qcow2 a.raw b.qcow2 t.qcow2
same_as_qemu_err convert -O qcow2 --bitmaps b.qcow2 c.qcow2 t.qcow2
same_as_qemu_err convert -O qcow2 a.raw missing.qcow2 t.qcow2
finish
