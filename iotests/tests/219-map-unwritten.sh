#!/bin/bash
# The iotests' settling of unwritten extents before a map comparison
# (common.sh settle, map_flags; iotests/settle.py), which iotests 030 and
# 076 compare qimg's maps with qemu-img's by:
#  - the cause: a fallocated, never written range of a raw image maps as
#    zeroes until something reads it, then as data, and as zeroes again
#    once its pages are evicted; a qcow2 image whose zero clusters an
#    amend to compat=0.10 wrote with FALLOC_FL_ZERO_RANGE maps its data
#    clusters "zero": true or false the same way (076 failed so once in
#    CI: the memory pressure of the tests beside it evicted the pages
#    its compare had read).  Shown where the file system keeps unwritten
#    extents (FIEMAP says so; ext4 and xfs do);
#  - settle: the same map with the pages cached and evicted, the bytes
#    unchanged; --evict: a raw image's unwritten range maps as zeroes
#    after a read; map_flags gives the same answer either way; qimg map
#    equals qemu-img map of a settled image (030's comparison).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3

# unwritten FILE: FIEMAP's count of FILE's unwritten extents
unwritten() {
    python3 -c '
import sys
sys.path.insert(0, sys.argv[1])
import settle
import os
fd = os.open(sys.argv[2], os.O_RDONLY)
print(len(settle.unwritten_extents(fd)))' "$IOTESTS_DIR" "$1"
}
cached() { cat "$1" >/dev/null; }
evicted() { python3 "$IOTESTS_DIR/settle.py" --evict "$1"; }
jmap() { "$QEMU_IMG" map -f "$2" --output=json "$1" | grep -v '^$'; }

"$QEMU_IMG" create -q -f raw -o preallocation=falloc r.raw 8M
# qcow2 data clusters, zero clusters over some, a snapshot sharing the L2
# table, downgraded: the zeroes are written in place (076's "shared L2")
mk_qcow2 sh.qcow2 64M "" 'write -P 1 0 1M' 'write -z 0 256k' 'write -z 2M 64k'
"$QEMU_IMG" snapshot -c s sh.qcow2
"$QEMU_IMG" amend -o compat=0.10 sh.qcow2

if [ "$(unwritten r.raw)" -gt 0 ] && [ "$(unwritten sh.qcow2)" -gt 0 ]; then
    cached r.raw
    a=$(jmap r.raw raw)
    evicted r.raw
    b=$(jmap r.raw raw)
    assert_eq "the cause: a raw image's unwritten range maps as data once read" \
        1 "$(grep -c '"data": true' <<<"$a")"
    assert_eq "the cause: ... and as zeroes once evicted" \
        1 "$(grep -c '"zero": true' <<<"$b")"
    cached sh.qcow2
    a=$(jmap sh.qcow2 qcow2)
    evicted sh.qcow2
    b=$(jmap sh.qcow2 qcow2)
    if [ "$a" = "$b" ]; then
        _fail "the cause: a downgraded qcow2 maps the same cached and evicted"
        echo "$a"
    else
        _checks=$((_checks + 1))
    fi
else
    echo "(this file system keeps no unwritten extents: the cause is not shown)"
fi

sum0=$(md5sum <r.raw) sum1=$(md5sum <sh.qcow2)
settle r.raw sh.qcow2
assert_eq "settle: no unwritten extent left" "0 0" "$(unwritten r.raw) $(unwritten sh.qcow2)"
assert_eq "settle: the bytes are unchanged" "$sum0 $sum1" "$(md5sum <r.raw) $(md5sum <sh.qcow2)"
for f in r.raw:raw sh.qcow2:qcow2; do
    cached "${f%:*}"
    a=$(jmap "${f%:*}" "${f#*:}")
    evicted "${f%:*}"
    b=$(jmap "${f%:*}" "${f#*:}")
    assert_eq "settle: ${f%:*} maps the same cached and evicted" "$a" "$b"
    same_as_qemu map --output=json "${f%:*}"
    cached "${f%:*}"
    same_as_qemu map --output=json "${f%:*}"
done

# --evict and map_flags on a raw image: zeroes, read or not
"$QEMU_IMG" create -q -f raw -o preallocation=falloc e.raw 8M
cached e.raw
a=$(map_flags e.raw raw)
assert_eq "map_flags of a read raw image's unwritten range: zeroes" \
    "0 4096 0 True False True
4096 8384512 0 True True False" "$a"
cached e.raw
assert_eq "map_flags of it again after a read" "$a" "$(map_flags e.raw raw)"
# and a qcow2 image: data, read or not
"$QEMU_IMG" create -q -f qcow2 -o preallocation=falloc p.qcow2 8M
a=$(map_flags p.qcow2)
assert_eq "map_flags of a falloc qcow2 image" "0 8388608 0 True False True" "$a"
evicted p.qcow2
assert_eq "map_flags of it again, evicted" "$a" "$(map_flags p.qcow2)"
finish
