#!/bin/bash
# qemu-io's write -b is done when it reports (tools/io-cmds.c fact 5; QEMU's
# 026 with vmstate writes): an error of the vmstate area's writes is that
# command's "write failed: <strerror>" with the injected errno, as qemu-io
# 7.2 prints it, not "wrote" and a failure at close; the image is left
# without corruption (leaks allowed, as QEMU's 026).  (Closing lines after such a
# failure are not compared: qemu-io rewrites its caches at close, qimg
# refuses writes after a failed metadata write, meta.c invariant 9.)
# cluster_alloc and l1_grow_alloc_table are raised before qcow2 allocates
# clusters, and before it allocates a grown L1 table (the vmstate area
# past the disk grows it).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

"$QEMU_IMG" create -q -f qcow2 -o cluster_size=1k base.qcow2 1G
for ev in write_aio l2_alloc_write l1_update cluster_alloc l1_grow_alloc_table; do
    for errno in 5 28; do
        printf '[inject-error]\nevent = "%s"\nerrno = "%s"\nonce = "on"\n' "$ev" "$errno" \
            >bd.conf
        cp base.qcow2 q.qcow2 && cp base.qcow2 m.qcow2 || exit 1
        "$QEMU_IO" -c 'write -b 0 128k' "blkdebug:$PWD/bd.conf:$PWD/q.qcow2" \
            >q.out 2>/dev/null
        "$QIMG" io -c 'write -b 0 128k' "blkdebug:$PWD/bd.conf:$PWD/m.qcow2" \
            >m.out 2>/dev/null
        assert_eq "$ev errno $errno: write -b result" "$(io_filter <q.out)" \
            "$(io_filter <m.out)"
        "$QEMU_IMG" check -q m.qcow2 >/dev/null 2>&1
        rc=$?
        assert_eq "$ev errno $errno: no corruption (check: 0 or 3, leaks)" ok \
            "$([ "$rc" = 0 ] || [ "$rc" = 3 ] && echo ok || echo "exit $rc")"
    done
done

# a write -b that works reports as qemu-io's, and the data is there
cp base.qcow2 t.qcow2
same_as_qemu_io "write -b then read -b" -c 'write -b -P 7 0 128k' \
    -c 'read -b -P 7 0 128k' t.qcow2

finish
