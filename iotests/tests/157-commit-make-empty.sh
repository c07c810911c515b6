#!/bin/bash
# qemu-img commit empties the top image as QEMU's qcow2_make_empty does
# (issue 29: QEMU's 098; qcow2/empty.c), against qemu-img 7.2, each tool in
# its own folder with the same file names:
# - a v3 top without snapshots is reset: the same bytes as qemu-img's top
#   (header, refcount table, one refcount block, a zeroed L1 table, the file
#   cut after it), which reads through the base;
# - a v2 top, and a top with an internal snapshot, are emptied by discards
#   (the snapshot keeps its data), reading as qemu-img's;
# - a blkdebug error at each of QEMU's four steps (l1_update,
#   empty_image_prepare, reftable_update, refblock_alloc) gives qemu-img's
#   "Failed to empty NAME: Input/output error", leaves the same bytes, and
#   the next open repairs the dirty image with the same lines and result;
# - a format that cannot be emptied (a qed top) is left as it is: "Image
#   committed.", as qemu-img.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

mkdir -p q m
# setup [CREATE-OPTS]: in q/ and m/, b.qcow2 and t.qcow2 over it, with data
setup() {
    local t
    for t in q m; do
        rm -f $t/*
        # shellcheck disable=SC2086
        (cd $t && "$QEMU_IMG" create -q -f qcow2 $1 b.qcow2 64M &&
            "$QEMU_IMG" create -q -f qcow2 $1 -b b.qcow2 -F qcow2 t.qcow2 64M &&
            "$QEMU_IO" -c 'write -P 7 0 64k' -c 'write -P 8 10M 64k' \
                -c 'write -P 9 40M 2M' t.qcow2 >/dev/null) || exit 1
    done
}
# both DESC ARGS...: run qemu-img in q/ and qimg in m/; same output and rc
both() {
    local desc=$1 qrc mrc
    shift
    (cd q && "$QEMU_IMG" "$@" >../q.out 2>&1)
    qrc=$?
    (cd m && "$QIMG" "$@" >../m.out 2>&1)
    mrc=$?
    assert_eq "$desc: exit code" "$qrc" "$mrc"
    assert_eq "$desc: output" "$(io_filter <q.out)" "$(io_filter <m.out)"
}
# top_map DESC: qemu-io's map of each top (what the top itself holds)
top_map() {
    assert_eq "$1: the top's map" "$("$QEMU_IO" -r -c map q/t.qcow2)" \
        "$("$QEMU_IO" -r -c map m/t.qcow2)"
}

setup ""
both "commit v3" commit t.qcow2
same_file "commit v3: the reset top" q/t.qcow2 m/t.qcow2
assert_rc "commit v3: the bases hold the same data" 0 "$QEMU_IMG" compare -q \
    q/b.qcow2 m/b.qcow2
both "commit v3: check" check t.qcow2
assert_eq "commit v3: reads the base" "$("$QEMU_IO" -c 'read -P 7 0 64k' \
    -c 'read -P 9 40M 2M' m/t.qcow2 | grep -c '^read')" 2

setup "-o compat=0.10"
both "commit v2" commit t.qcow2
both "commit v2: check" check t.qcow2
top_map "commit v2"

setup ""
for t in q m; do "$QEMU_IMG" snapshot -c s1 $t/t.qcow2; done
both "commit with a snapshot" commit t.qcow2
both "commit with a snapshot: check" check t.qcow2
top_map "commit with a snapshot"
for t in q m; do "$QEMU_IMG" snapshot -a s1 $t/t.qcow2; done
assert_eq "the snapshot reads back" "$("$QEMU_IO" -c 'read -P 8 10M 64k' m/t.qcow2 |
    grep -c '^read')" 1

for e in l1_update empty_image_prepare reftable_update refblock_alloc; do
    setup ""
    printf '[inject-error]\nevent = "%s"\n' "$e" >bd.conf
    both "$e: commit" commit "blkdebug:../bd.conf:t.qcow2"
    same_file "$e: the top after the error" q/t.qcow2 m/t.qcow2
    (cd q && "$QEMU_IO" -c close t.qcow2 >../q.out 2>&1)
    (cd m && "$QIMG" io -c close t.qcow2 >../m.out 2>&1)
    assert_eq "$e: the repair at the next open" "$(io_filter <q.out)" \
        "$(io_filter <m.out)"
    both "$e: check after the repair" check t.qcow2
done

for t in q m; do
    rm -f $t/*
    (cd $t && "$QEMU_IMG" create -q -f qcow2 b.qcow2 1M &&
        "$QEMU_IMG" create -q -f qed -b b.qcow2 -F qcow2 t.qcow2 1M &&
        "$QEMU_IO" -c 'write -P 5 0 64k' t.qcow2 >/dev/null) || exit 1
done
both "commit of a qed top (not emptied)" commit t.qcow2
top_map "commit of a qed top"
finish
