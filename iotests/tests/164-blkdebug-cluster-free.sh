#!/bin/bash
# QEMU's blkdebug event cluster_free (issue 29: QEMU's 217), against
# qemu-img 7.2 on copies of one image: qcow2 raises it each time it lowers
# refcounts (alloc.c), and the rule stays armed for every later request
# (block/faulty.c invariant 7), so deleting a snapshot whose old snapshot
# table is freed first leaves the snapshot gone and its clusters leaked:
# the same "qcow2_free_clusters failed" line and error (QEMU's "Failed to
# free the cluster and L1 table"), the same leaks in qemu-img check, and
# check -r leaks repairs the same clusters.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

"$QEMU_IMG" create -q -f qcow2 base.qcow2 64M
"$QEMU_IO" -c 'write 0 64k' base.qcow2 >/dev/null
"$QEMU_IMG" snapshot -c foo base.qcow2
printf '[inject-error]\nevent = "cluster_free"\nerrno = "5"\n' >bd.conf

cp base.qcow2 q.qcow2 && cp base.qcow2 m.qcow2 || exit 1
"$QEMU_IMG" snapshot -d foo "blkdebug:$PWD/bd.conf:$PWD/q.qcow2" >q.out 2>q.err
qrc=$?
"$QIMG" snapshot -d foo "blkdebug:$PWD/bd.conf:$PWD/m.qcow2" >m.out 2>m.err
mrc=$?
assert_eq "snapshot -d: exit code" "$qrc" "$mrc"
assert_eq "snapshot -d: stderr" "$(io_filter <q.err)" "$(io_filter <m.err)"
assert_eq "snapshot -d: stdout" "$(cat q.out)" "$(cat m.out)"
assert_eq "the snapshot is gone" "$("$QEMU_IMG" snapshot -l q.qcow2)" \
    "$("$QEMU_IMG" snapshot -l m.qcow2)"
assert_eq "only leaks" "$("$QEMU_IMG" check q.qcow2 2>&1 | sed 's/q.qcow2/IMG/')" \
    "$("$QEMU_IMG" check m.qcow2 2>&1 | sed 's/m.qcow2/IMG/')"
assert_eq "check -r leaks repairs them" \
    "$("$QEMU_IMG" check -r leaks q.qcow2 2>&1 | sed 's/q.qcow2/IMG/')" \
    "$("$QEMU_IMG" check -r leaks m.qcow2 2>&1 | sed 's/m.qcow2/IMG/')"

finish
