#!/bin/bash
# qimg create -f raw: same "Formatting" line and exit code as qemu-img, and
# the image it makes looks the same to qemu-img info.
. "${0%/*}/../common.sh"
requires qimg qemu-img

mkdir q m

# create_both ARGS... FILE [SIZE]: create FILE in q/ with qemu-img and in m/
# with qimg (run from inside each folder so the printed names agree).
create_both() {
    (cd q && "$QEMU_IMG" create "$@") >.q.out 2>.q.err
    Q_RC=$?
    (cd m && "$QIMG" create "$@") >.m.out 2>.m.err
    M_RC=$?
    _checks=$((_checks + 1))
    if ! cmp -s .q.out .m.out || [ "$Q_RC" != "$M_RC" ]; then
        _fail "create $* (qemu-img rc $Q_RC, qimg rc $M_RC)"
        diff -u --label qemu-img --label qimg .q.out .m.out
        cat .m.err
        return 1
    fi
}

# Both files must exist (or not) together and have the same info.
same_image() {
    local f=$1
    _checks=$((_checks + 1))
    if [ -e "q/$f" ] && [ ! -e "m/$f" ]; then
        _fail "qimg did not create $f"
        return 1
    fi
    if [ ! -e "q/$f" ] && [ -e "m/$f" ]; then
        _fail "qimg created $f but qemu-img did not"
        return 1
    fi
    [ -e "q/$f" ] || return 0
    # (what a map says of a preallocated file's unwritten extents depends
    # on which of their pages a read left cached: common.sh settle)
    settle "q/$f" "m/$f"
    assert_eq "info of $f" "$(cd q && "$QEMU_IMG" info --output=json "$f" |
        grep -v actual-size)" "$(cd m && "$QEMU_IMG" info --output=json "$f" |
        grep -v actual-size)"
    assert_eq "map of $f" "$(cd q && "$QEMU_IMG" map --output=json "$f")" \
        "$(cd m && "$QEMU_IMG" map --output=json "$f")"
}

n=0
for size in 0 1 511 512 1000 1k 1K 4096 1.5M 1.7k 1.3k 0.5k 1.0 1.k 64M 1G 1.5G \
    2T 1b 1B 0x10 00010 010k +5k 1m 1g 1t; do
    n=$((n + 1))
    create_both -f raw "img$n.raw" "$size"
    same_image "img$n.raw"
done

# Fractions, rounding and huge sizes: the printed size must agree (creating
# the file may fail for the huge ones, with either tool).
for size in 7.99E 1.5e 7.9999999E 1.9999999999999999999k 0.0000001k 1.0000001k \
    3.14159G 0.999999999999T 1.00048828125k 0x7fffffffffffffff; do
    run_both create -f raw frac.raw "$size"
    assert_eq "Formatting line for size $size" "$(head -n 1 "$SCRATCH/.q.out")" \
        "$(head -n 1 "$SCRATCH/.m.out")"
    rm -f frac.raw
done
run_both create -f raw hex.raw 0x10k
assert_eq "hex with suffix" "$Q_OUT $Q_ERR" "$M_OUT $M_ERR"

# Quiet, default format, size from -o, preallocation.
create_both -q -f raw quiet.raw 1M
same_image quiet.raw
create_both def.raw 2M
same_image def.raw
create_both -f raw -o size=3M osize.raw
same_image osize.raw
create_both -f raw -o size=1.5k,preallocation=full pfull.raw
same_image pfull.raw
create_both -f raw -o preallocation=falloc pfalloc.raw 1M
same_image pfalloc.raw
create_both -f raw -o preallocation=off -o nocow=off,extent_size_hint=0 popts.raw 1M
same_image popts.raw
create_both -f raw -q later.raw 1M
same_image later.raw

# Existing files are replaced.
head -c 3M /dev/urandom >q/exist.raw
cp q/exist.raw m/exist.raw
create_both -f raw exist.raw 1M
same_image exist.raw

# Help.
create_both -f raw -o help
create_both -f raw -o help x.raw
create_both -o '?'

# Bad sizes and options: same exit code, nothing created.
for args in "bad.raw 1X" "bad.raw 1.5" "bad.raw abc" "bad.raw 1kB" "bad.raw 1e3" \
    "bad.raw 1.5b" "bad.raw 0.1b" "bad.raw .5k" "bad.raw 5kk" "bad.raw 5k5" \
    "bad.raw 0x" "bad.raw 0x1.8k" "bad.raw 1.5.5k" "bad.raw 16E" "bad.raw 8E" \
    "bad.raw 9223372036854775808" "bad.raw 18446744073709551616" "bad.raw -1" \
    "bad.raw" "" "bad.raw 1M extra" "-o size=1X bad.raw" "-o size=1M bad.raw 1M" \
    "-o foo=1 bad.raw 1M" "-o cluster_size=4k bad.raw 1M" "-o size=1M, bad.raw" \
    "-o ,size=1M bad.raw" "-o nocow=maybe bad.raw 1M" "-x bad.raw 1M" \
    "-b other.raw bad.raw 1M" "-f"; do
    # shellcheck disable=SC2086
    same_as_qemu_err create -f raw $args
    [ -e bad.raw ] && _fail "create -f raw $args left bad.raw behind"
    rm -f bad.raw
done

# Errors from the library side: a missing folder, an unknown format.
run_both create -f raw nodir/x.raw 1M
assert_eq "create in a missing folder: exit code" "$Q_RC" "$M_RC"
assert_eq "create in a missing folder: stdout" "$Q_OUT" "$M_OUT"
run_both create -f foo x.raw 1M
assert_eq "unknown format" "$Q_ERR $Q_RC" "$M_ERR $M_RC"

finish
