#!/bin/bash
# qimg dd against qemu-img dd on the same inputs: the output's bytes (raw)
# or contents and allocation (qcow2), stdout, stderr and exit code, over
# bs/count/skip combinations (count counts from the input's start, skip
# past the end makes an empty output), qcow2 and raw inputs with a backing
# chain, -O qcow2, and the refusals (bad operands, missing files, an
# output that cannot be created, an input in use without -U).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

# dd_both ARGS...: run both with the same arguments (of=out.img), keep
# qemu-img's output as q.img and qimg's as m.img, compare messages and rc.
dd_both() {
    rm -f out.img q.img m.img
    run_both dd "$@"
    [ -e out.img ] && mv out.img m.img
    "$QEMU_IMG" dd "$@" >/dev/null 2>&1 # (run_both ran qemu-img first)
    [ -e out.img ] && mv out.img q.img
    _checks=$((_checks + 1))
    if [ "$Q_RC" != "$M_RC" ] || [ "$Q_OUT" != "$M_OUT" ] || [ "$Q_ERR" != "$M_ERR" ]; then
        _fail "dd $*: qemu-img rc $Q_RC '$Q_OUT' '$Q_ERR', qimg rc $M_RC '$M_OUT' '$M_ERR'"
        return 1
    fi
    _checks=$((_checks + 1))
    if [ -e q.img ] && [ ! -e m.img ] || [ ! -e q.img ] && [ -e m.img ]; then
        _fail "dd $*: one made an output, the other did not"
    fi
}

head -c 1000000 /dev/urandom >in.raw
for ops in "" "bs=512 skip=2 count=3" "bs=1k count=4" "bs=3000" "skip=10000" "bs=4096 skip=1" \
    "count=0" "bs=1M" "bs=7 skip=3 count=1000" "bs=64k count=3 skip=1" "count=1k" "skip=1k"; do
    # shellcheck disable=SC2086
    dd_both if=in.raw of=out.img $ops && [ -e q.img ] &&
        assert_rc "dd $ops: the bytes" 0 cmp q.img m.img
done

"$QEMU_IMG" create -q -f qcow2 b.qcow2 4M
"$QEMU_IO" -c 'write -P 1 0 1M' -c 'write -z 1M 1M' -c 'write -P 2 3M 100k' b.qcow2 >/dev/null
"$QEMU_IMG" create -q -f qcow2 -b b.qcow2 -F qcow2 t.qcow2 5M
"$QEMU_IO" -c 'write -P 3 512k 64k' -c 'write -P 4 4M 10k' t.qcow2 >/dev/null
for ops in "" "bs=64k skip=3" "bs=1M count=2" "-O qcow2" "-O qcow2 bs=4k skip=100 count=400" \
    "-f qcow2 -O raw bs=1k"; do
    # shellcheck disable=SC2206
    set -- $ops
    dd_both "$@" if=t.qcow2 of=out.img
    fmt=raw
    [[ "$ops" == *"-O qcow2"* ]] && fmt=qcow2
    assert_rc "dd $ops t.qcow2: contents" 0 "$QEMU_IMG" compare -f "$fmt" -F "$fmt" q.img m.img
    [ "$fmt" = qcow2 ] && assert_eq "dd $ops t.qcow2: qemu-img's map" \
        "$(map_flags q.img)" "$(map_flags m.img)" &&
        assert_rc "dd $ops t.qcow2: check" 0 "$QEMU_IMG" check -q m.img
done

# refusals
for ops in "if=in.raw" "of=out.img" "" "if=in.raw of=out.img bs=0" "if=in.raw of=out.img bs=3G" \
    "if=in.raw of=out.img count=-1" "if=in.raw of=out.img skip=x" "if=in.raw of=out.img foo=1" \
    "if=in.raw of=out.img bs" "if=nosuch of=out.img" "if=in.raw of=/nonexistent/out.img" \
    "-O foo if=in.raw of=out.img"; do
    # shellcheck disable=SC2086
    dd_both $ops
done
expect_error "dd of a raw file as qcow2" dd -f qcow2 if=in.raw of=out.img
# an input someone writes: refused without -U, read with it
hold_image t.qcow2
holder=$HOLDER
trap 'kill $holder 2>/dev/null; _cleanup' EXIT
dd_both if=t.qcow2 of=out.img
dd_both -U if=t.qcow2 of=out.img bs=64k
assert_rc "dd -U of an image in use: contents" 0 cmp q.img m.img
kill $holder

finish
