#!/bin/bash
# The data file nodes a caller names by options.  A qcow2 image opened with
# a null-co (null-aio) node as its data file, by a json: name's
# "data-file": {"driver": "null-co", "size": ...} (QEMU
# iotest 270: guest data written nowhere, the image's metadata as for a
# real data file), against qemu-io 7.2 on copies of the same image:
#  - a write over a backing file's data: the same output, and the same
#    L2 entries and refcounts afterwards (qemu-img map and check);
#  - read-zeroes: reads of the data file return zeros; without it a
#    read leaves the buffer (pattern check fails in both tools);
#  - the node's options only: another key is QEMU's "Block protocol
#    'null-co' doesn't support the option", a bad size its size message;
#  - qemu-img info, check and map through such a name;
#  - "data-file": {"driver": "blkdebug", "image": {...}} (QEMU 244): the
#    blkdebug node itself as the data file, its inject-error rules applied
#    to the data file's requests, QEMU's messages for a node reference and
#    for no image.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

qi create -q -f qcow2 base.qcow2 64M
"$QEMU_IO" -c 'write -P 3 0 512' base.qcow2 >/dev/null
qi create -q -f qcow2 -o cluster_size=2M,data_file=t.data -b base.qcow2 -F qcow2 tmpl.qcow2 64M

name() { # name NODE-OPTIONS: the image with a null data file
    echo "json:{'driver': 'qcow2', 'file': {'filename': 't.qcow2'}, 'data-file': {$1}}"
}

# ---- writes: output and the metadata they leave (270) ----
for d in "'driver': 'null-co', 'size': '67108864'" "'driver': 'null-aio'"; do
    for cmds in "write 768 $((4 * 1024 * 1024 - 512))" "write -z 1M 3M" "write -P 9 8M 64k;discard 8M 2M"; do
        args=()
        IFS=';' read -ra cs <<<"$cmds"
        for c in "${cs[@]}"; do args+=(-c "$c"); done
        cp tmpl.qcow2 t.qcow2
        "$QEMU_IO" "${args[@]}" "$(name "$d")" 2>&1 | io_filter >q.out
        q_map=$("$QEMU_IMG" map --output=json -U t.qcow2)
        q_chk=$("$QEMU_IMG" check t.qcow2 2>&1)
        cp tmpl.qcow2 t.qcow2
        "$QIMG" io "${args[@]}" "$(name "$d")" 2>&1 | io_filter >m.out
        assert_eq "$d: $cmds: output" "$(cat q.out)" "$(cat m.out)"
        assert_eq "$d: $cmds: map" "$q_map" "$("$QEMU_IMG" map --output=json -U t.qcow2)"
        assert_eq "$d: $cmds: check" "$q_chk" "$("$QEMU_IMG" check t.qcow2 2>&1)"
    done
done

# ---- reads, with and without read-zeroes ----
cp tmpl.qcow2 t.qcow2
"$QEMU_IO" -c 'write -P 7 0 64k' t.qcow2 >/dev/null
for d in "'driver': 'null-co', 'read-zeroes': true" "'driver': 'null-co'" \
    "'driver': 'null-co', 'latency-ns': 1000, 'read-zeroes': 'on'"; do
    same_as_qemu_io "read ($d)" -r -c 'read -P 0 0 64k' -c 'read -P 3 2M 512' "$(name "$d")"
done

# ---- the node's options only ----
same_as_qemu_io "unknown option" -r -c 'read 0 512' "$(name "'driver': 'null-co', 'foo': 1")"
# bad values abort qemu-io 7.2 ("Unexpected error in parse_option_size()"):
# qimg refuses them with the message QEMU prints before it aborts
for d in "'size': 'x'|Parameter 'size' expects a non-negative number below 2^64" \
    "'read-zeroes': 'maybe'|Parameter 'read-zeroes' expects 'on' or 'off'"; do
    assert_rc "refused (${d%%|*})" 1 "$QIMG" io -r -c 'read 0 512' \
        "$(name "'driver': 'null-aio', ${d%%|*}")"
    assert_eq "refused (${d%%|*}): why" "${d#*|}" "$(sed -n 's/.*: \(Parameter .*\)/\1/p' .out)"
done

# ---- qemu-img through such a name ----
for cmd in "info" "check" "map"; do
    same_as_qemu_err $cmd "$(name "'driver': 'null-co', 'size': 67108864")"
done

# ---- a blkdebug node as the data file (244) ----
rm -f t.qcow2 t.data
qi create -q -f qcow2 -o data_file=t.data t.qcow2 64M
"$QEMU_IO" -c 'write -P 6 0 64k' t.qcow2 >/dev/null
dbg() { # dbg NODE-OPTIONS
    echo "json:{'driver': 'qcow2', 'file': {'driver': 'file', 'filename': 't.qcow2'}, 'data-file': {'driver': 'blkdebug', $1}}"
}
img="'image': {'driver': 'file', 'filename': 't.data'}"
same_as_qemu_io "blkdebug data file" -c 'read -P 6 0 512' -c 'write -P 7 2M 4k' \
    -c 'read -P 7 2M 4k' -c map "$(dbg "$img")"
same_as_qemu_io "blkdebug data file: read error" \
    -c 'read -P 6 0 512' -c 'read -P 0 1M 512' -c 'read -P 7 2M 4k' \
    "$(dbg "'inject-error': [{'event': 'none', 'iotype': 'read', 'errno': '28'}], $img")"
same_as_qemu_io "blkdebug data file: node reference" -c 'read 0 512' "$(dbg "'image': 'x'")"
same_as_qemu_io "blkdebug data file: no image" -c 'read 0 512' \
    "$(dbg "'inject-error': [{'event': 'none'}]")"

finish
