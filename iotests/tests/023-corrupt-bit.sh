#!/bin/bash
# The corrupt bit (incompatible feature bit 1) and the dirty bit (lazy
# refcounts) around check and repair, against qemu-img:
#   - an image with the corrupt bit opens read-only for reading commands
#     (info shows "corrupt: true"), and read-write commands refuse it with
#     "qcow2: Image is corrupt; cannot be opened read/write";
#   - check opens it anyway (check mode); a plain check leaves the bit,
#     a successful repair (-r leaks or -r all) clears it, a repair that
#     leaves corruptions keeps it, a repair that trips the overlap check
#     sets it (as QEMU does);
#   - after a crash with lazy refcounts (dirty bit), check reports the
#     damage and -r all repairs it and clears the bit.
# After every step qemu-img info on qimg's copy equals qemu-img info on a
# copy that qemu-img handled the same way.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3

EDIT=("python3" "$IOTESTS_DIR/tests/020-qcow2edit.py")
mkdir -p q m

ed() {
    "${EDIT[@]}" "$@" || { echo "setup: edit $* failed"; exit 1; }
}

# flag IMG: the corrupt flag as qemu-img info reports it
flag() {
    "$QEMU_IMG" info --output=json "$1" | python3 -c '
import json, sys
print("corrupt" if json.load(sys.stdin)["format-specific"]["data"].get("corrupt") else "clean")'
}

dirty() { # dirty IMG: dirty-flag as qemu-img info --output=json reports it
    "$QEMU_IMG" info --output=json "$1" | python3 -c '
import json, sys
print(json.load(sys.stdin).get("dirty-flag", False))'
}

# both ARGS...: run "qemu-img ARGS" in q/ and "qimg ARGS" in m/ on their own
# copies (t.qcow2); results as in common.sh's run_both.
both() {
    (cd q && "$QEMU_IMG" "$@" >../.q.out 2>../.q.err)
    Q_RC=$?
    (cd m && timeout 60 "$QIMG" "$@" >../.m.out 2>../.m.err)
    M_RC=$?
    _checks=$((_checks + 1))
    if [ "$Q_RC" != "$M_RC" ]; then
        _fail "$*: exit code qemu-img $Q_RC, qimg $M_RC"
        head -n 5 .m.err
    fi
    _checks=$((_checks + 1))
    if ! diff -q <(sed -e 's/^qemu-img: /qimg: /' .q.err) .m.err >/dev/null; then
        _fail "$*: stderr differs (- qemu-img, + qimg)"
        diff -u <(sed -e 's/^qemu-img: /qimg: /' .q.err) .m.err | head -n 20
    fi
}

# same_state DESC: qemu-img info of both copies agrees (corrupt, dirty)
same_state() {
    local a b
    a="$(flag q/t.qcow2) $(dirty q/t.qcow2)"
    b="$(flag m/t.qcow2) $(dirty m/t.qcow2)"
    _checks=$((_checks + 1))
    [ "$a" = "$b" ] || _fail "$1: qemu-img's copy is '$a', qimg's '$b'"
}

expect_state() { # expect_state DESC STATE
    local got
    got="$(flag m/t.qcow2) $(dirty m/t.qcow2)"
    _checks=$((_checks + 1))
    [ "$got" = "$2" ] || _fail "$1: qimg's copy is '$got', expected '$2'"
}

setup() { # setup IMG: fresh copies in q/ and m/
    cp "$1" q/t.qcow2
    cp "$1" m/t.qcow2
}

"$QEMU_IMG" create -q -f qcow2 good.qcow2 64M
"$QEMU_IO" -f qcow2 -c 'write -P 1 0 128k' good.qcow2 >/dev/null
cp good.qcow2 corrupt.qcow2
ed corrupt.qcow2 poke 72 Q 2

# ---- reading commands work, writing commands refuse ----

setup corrupt.qcow2
cp corrupt.qcow2 ro.qcow2
same_as_qemu info --output=json ro.qcow2
same_as_qemu map --output=json ro.qcow2
same_as_qemu compare ro.qcow2 good.qcow2
same_as_qemu snapshot -l ro.qcow2
both snapshot -c s1 t.qcow2
_checks=$((_checks + 1))
grep -q -F "qimg: Could not open 't.qcow2': qcow2: Image is corrupt; cannot be opened read/write" .m.err ||
    _fail "snapshot -c on a corrupt image: no 'Image is corrupt' refusal"
if "$QIMG" io --help >/dev/null 2>&1; then
    (cd m && "$QIMG" io -f qcow2 -c 'write 0 512' t.qcow2 >../.m.out 2>../.m.err)
    _checks=$((_checks + 1))
    grep -q "Image is corrupt" .m.out .m.err || _fail "io write on a corrupt image was not refused"
fi
same_state "read-only commands"
expect_state "read-only commands" "corrupt False"

# ---- check leaves the bit, a successful repair clears it ----

both check t.qcow2
same_state "plain check"
expect_state "plain check" "corrupt False"
for fix in leaks all; do
    setup corrupt.qcow2
    both check -r $fix t.qcow2
    same_state "check -r $fix"
    expect_state "check -r $fix" "clean False"
    (cd m && "$QIMG" snapshot -c s1 t.qcow2) >.m.out 2>&1
    _checks=$((_checks + 1))
    [ $? = 0 ] || { _fail "snapshot -c after check -r $fix failed"; cat .m.out; }
done

# with something to repair: a leak (-r leaks), a refcount of 0 (-r all,
# rebuild); the bit goes with the damage
cp corrupt.qcow2 corrupt-leak.qcow2
truncate -s $((16 * 65536)) corrupt-leak.qcow2
ed corrupt-leak.qcow2 setref 15 1
setup corrupt-leak.qcow2
both check -r leaks t.qcow2
same_state "corrupt + leak, -r leaks"
expect_state "corrupt + leak, -r leaks" "clean False"
cp corrupt.qcow2 corrupt-zero.qcow2
ed corrupt-zero.qcow2 setref 5 0
setup corrupt-zero.qcow2
both check -r leaks t.qcow2
same_state "corrupt + refcount 0, -r leaks"
expect_state "corrupt + refcount 0, -r leaks" "corrupt False"
both check -r all t.qcow2
same_state "corrupt + refcount 0, -r all"
expect_state "corrupt + refcount 0, -r all" "clean False"

# a repair that cannot fix everything keeps the bit
cp corrupt.qcow2 corrupt-unaligned.qcow2
ed corrupt-unaligned.qcow2 l2 0 0x8000000000050200
setup corrupt-unaligned.qcow2
both check -r all t.qcow2
same_state "corrupt + unaligned data, -r all"
expect_state "corrupt + unaligned data, -r all" "corrupt False"

# a repair write that would overlap metadata sets the bit (the snapshot's
# L1 table is claimed to be 32 MiB long and covers the active L2 table)
cp good.qcow2 snap.qcow2
"$QEMU_IMG" snapshot -c snap1 snap.qcow2
"$QEMU_IO" -f qcow2 -c 'write -P 2 0 64k' snap.qcow2 >/dev/null
ed snap.qcow2 snapfield 0 l1_size 0x400001
setup snap.qcow2
both check -r all t.qcow2
_checks=$((_checks + 1))
grep -q -F "qcow2: Marking image as corrupt: Preventing invalid write on metadata (overlaps with inactive L1 table)" .m.err ||
    _fail "overlap during repair: no 'Marking image as corrupt' message"
same_state "overlap during repair"
expect_state "overlap during repair" "corrupt False"

# ---- the dirty bit: a crash with lazy refcounts ----

"$QEMU_IMG" create -q -f qcow2 -o lazy_refcounts=on lazy.qcow2 64M
sh -c '"$0" -f qcow2 -c "write -P 1 0 128k" -c abort lazy.qcow2' "$QEMU_IO" >/dev/null 2>&1
setup lazy.qcow2
expect_state "after the crash" "clean True"
both check t.qcow2
same_state "plain check of a dirty image"
both check -r all t.qcow2
same_state "check -r all of a dirty image"
expect_state "check -r all of a dirty image" "clean False"
(cd m && "$QEMU_IMG" check t.qcow2 >/dev/null 2>&1)
_checks=$((_checks + 1))
[ $? = 0 ] || _fail "qemu-img check after qimg repaired the dirty image"

finish
