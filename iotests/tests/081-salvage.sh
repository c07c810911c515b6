#!/bin/bash
# convert --salvage (api/copy.c, copy-plan.c fact 5; tools/convert.c fact
# 7) against qemu-img convert --salvage on the same sources with the same
# bad sectors (QEMU's blkdebug read_aio errors at a sector, qimg's fault
# node at the same byte): the same bytes in the target, the same warnings
# (as sets: both read chunks in parallel, so two bad chunks warn in either
# order)
# ("warning: error while reading offset N: ..."), none with -q, exit 0;
# without --salvage both fail.  Sources: raw, and qcow2 with the error in
# a data cluster, into raw and qcow2 targets.  The same with one QEMU
# blkdebug config file given to both (block/faulty-config.c), and that
# file's refusals in qemu-img's words (a bad event name, a missing file,
# an unknown group), a rule with an iotype, and block status errors (warned
# twice, in qemu-img's order).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

head -c 4M /dev/urandom >s.raw
"$QEMU_IMG" convert -f raw -O qcow2 s.raw s.qcow2
qemu_src() { # FMT FILE SECTOR...: a json: name with blkdebug errors
    local errs="" s
    for s in "${@:3}"; do
        errs="$errs${errs:+,}{\"event\":\"read_aio\",\"sector\":$s}"
    done
    echo "json:{\"driver\":\"$1\",\"file\":{\"driver\":\"blkdebug\",\"inject-error\":[$errs],\"image\":{\"driver\":\"file\",\"filename\":\"$2\"}}}"
}
qimg_src() { # FILE SECTOR...
    local rules="" s
    for s in "${@:2}"; do
        rules="$rules${rules:+;}op=read,offset=$((s * 512))"
    done
    echo "blkdebug:$rules:$1"
}
# host offset of guest byte 1 MiB in s.qcow2 (data cluster)
host=$("$QEMU_IMG" map --output=json s.qcow2 | python3 -c '
import json, sys
for e in json.load(sys.stdin):
    if e["start"] <= 1048576 < e["start"] + e["length"]:
        print(e["offset"] + 1048576 - e["start"])')

for case in "raw s.raw 2048 4000" "qcow2 s.qcow2 $((host / 512)) $((host / 512 + 7))"; do
    # shellcheck disable=SC2086
    set -- $case
    fmt=$1 file=$2
    shift 2
    for out in raw qcow2; do
        for q in "" -q; do
            rm -f q.img m.img
            # shellcheck disable=SC2086
            "$QEMU_IMG" convert $q --salvage -f "$fmt" -O $out "$(qemu_src "$fmt" "$file" "$@")" \
                q.img >q.err 2>&1
            qrc=$?
            # shellcheck disable=SC2086
            "$QIMG" convert $q --salvage -f "$fmt" -O $out "$(qimg_src "$file" "$@")" m.img \
                >m.err 2>&1
            mrc=$?
            sed -i 's/^qemu-img: /qimg: /' q.err
            assert_eq "$fmt -> $out $q: exit code" "$qrc" "$mrc"
            assert_eq "$fmt -> $out $q: warnings" "$(sort q.err)" "$(sort m.err)"
            assert_rc "$fmt -> $out $q: the bytes" 0 "$QEMU_IMG" compare -q q.img m.img
        done
    done
    rm -f q.img m.img
    "$QEMU_IMG" convert -f "$fmt" -O raw "$(qemu_src "$fmt" "$file" "$@")" q.img 2>/dev/null
    qrc=$?
    "$QIMG" convert -f "$fmt" -O raw "$(qimg_src "$file" "$@")" m.img 2>/dev/null
    assert_eq "$fmt without --salvage: fails" "$qrc" "$?"
done
# salvage_cfg DESC CFG FMT FILTER: convert --salvage of s.raw under the
# blkdebug config file CFG into a FMT target, with qemu-img and qimg: the
# same exit code, warnings (through FILTER: sort compares them as sets)
# and bytes.
salvage_cfg() {
    local desc=$1 cfg=$2 fmt=$3 filter=$4 qrc
    rm -f q.img m.img
    "$QEMU_IMG" convert --salvage -f raw -O "$fmt" "blkdebug:$cfg:s.raw" q.img >q.err 2>&1
    qrc=$?
    "$QIMG" convert --salvage -f raw -O "$fmt" "blkdebug:$cfg:s.raw" m.img >m.err 2>&1
    assert_eq "$desc: exit code" "$qrc" "$?"
    sed -i 's/^qemu-img: /qimg: /' q.err
    assert_eq "$desc: warnings" "$($filter q.err)" "$($filter m.err)"
    assert_rc "$desc: the bytes" 0 "$QEMU_IMG" compare -q q.img m.img
}
# one blkdebug config file for both (QEMU's format)
printf '[inject-error]\nevent = "read_aio"\nerrno = "5"\nsector = "2048"\n\n[inject-error]\nevent = "read_aio"\nsector = "6000"\n' >rd.cfg
salvage_cfg "config file" rd.cfg raw sort
printf '[inject-error]\nevent = "nosuch"\n' >bad.cfg
printf '[foo]\nx = "1"\n' >grp.cfg
for cfg in bad.cfg grp.cfg nosuch.cfg; do
    same_as_qemu_err convert -f raw -O raw "blkdebug:$cfg:s.raw" out.raw
done
# iotype (faulty-config.c fact 5): a read rule fails the reads alone
printf '[inject-error]\nevent = "read_aio"\niotype = "read"\nsector = "100"\n' >st.cfg
salvage_cfg "iotype" st.cfg raw sort
# block status failing at two sectors and a read at a third ("none" rules:
# every request from the open on): the status is asked again for fewer
# sectors down to one (copy-plan.c fact 5), each failure warned in the
# walk before the copy and again in the copy, in qemu-img's order
# (copy.c invariant 7)
printf '[inject-error]\nevent = "none"\niotype = "block-status"\nsector = "%s"\n' \
    1000 5001 >bs.cfg
printf '[inject-error]\nevent = "none"\niotype = "read"\nsector = "3000"\n' >>bs.cfg
salvage_cfg "block status, in order" bs.cfg qcow2 cat
finish
