#!/bin/bash
# Keys and hostile LUKS headers (crypto/luks.c invariant 5, luks-codec.c,
# secret.c, tools/objects.c):
#  - a key slot or master-key digest asking for 2^32 - 1 PBKDF2 iterations
#    (hours of CPU in qemu-img, which is not run on them) is refused at
#    once with a message naming the count and the limit, in a qcow2 and a
#    luks image; QIMG_LUKS_MAX_ITERATIONS lowers and raises the limit
#    (a bad value is refused), and qimg never creates a slot past it;
#  - a slot with an absurd stripe count: qemu-img's refusal;
#  - a secret that is not UTF-8: qemu-img's message;
#  - the passphrase never appears in the image.
. "${0%/*}/../common.sh"
requires qimg qemu-img python3

S="--object secret,id=s0,data=hunter2"
rm -f l.luks q.qcow2
# shellcheck disable=SC2086
"$QIMG" create -q -f luks $S -o key-secret=s0,iter-time=10 l.luks 1M
# shellcheck disable=SC2086
"$QIMG" create -q -f qcow2 $S -o encrypt.format=luks,encrypt.key-secret=s0,encrypt.iter-time=10 \
    q.qcow2 1M
# patch IMG WHERE VALUE: a 32-bit field at WHERE bytes into the LUKS header
cat >patch.py <<'PY'
import struct, sys
f, where, val = sys.argv[1], int(sys.argv[2], 0), int(sys.argv[3], 0)
b = bytearray(open(f, "rb").read())
base = 0
if b[:4] == b"QFI\xfb":
    o = struct.unpack(">I", b[100:104])[0]
    while True:
        t, l = struct.unpack(">II", b[o:o + 8])
        if t == 0x0537be77:
            base = struct.unpack(">Q", b[o + 8:o + 16])[0]
            break
        o += 8 + ((l + 7) & ~7)
b[base + where:base + where + 4] = struct.pack(">I", val)
open(f, "wb").write(b)
PY
lopts() { echo "driver=luks,file.filename=$1,key-secret=s0"; }
qopts() { echo "driver=qcow2,file.filename=$1,encrypt.key-secret=s0"; }
LIMIT="more than qimg's limit of 100000000 (raise it: QIMG_LUKS_MAX_ITERATIONS for the qimg command, luks_max_iterations in the API)"

for img in l.luks q.qcow2; do
    if [ "$img" = l.luks ]; then o=$(lopts bad); else o=$(qopts bad); fi
    # slot 0's iterations (208 + 4), then the master key's (164)
    cp $img bad
    python3 patch.py bad 212 0xffffffff
    # shellcheck disable=SC2086
    "$QIMG" map $S --image-opts "$o" >m.out 2>m.err
    assert_eq "$img: slot iterations 2^32 - 1" \
        "1 qimg: Could not open '$o': Keyslot 0 asks for 4294967295 PBKDF2 iterations, $LIMIT" \
        "$? $(cat m.err)"
    cp $img bad
    python3 patch.py bad 164 4000000000
    # shellcheck disable=SC2086
    "$QIMG" map $S --image-opts "$o" >m.out 2>m.err
    assert_eq "$img: master key iterations 4e9" \
        "1 qimg: Could not open '$o': The LUKS master key digest asks for 4000000000 PBKDF2 iterations, $LIMIT" \
        "$? $(cat m.err)"
    # info (metadata only, as qemu-img's) derives nothing: it shows the image
    # shellcheck disable=SC2086
    assert_rc "$img: info" 0 "$QIMG" info $S --image-opts "$o"
    # a stripe count past 4000: qemu-img's refusal (checked before a key)
    cp $img bad
    python3 patch.py bad 252 4000000
    same_as_qemu_err info bad
    # the limit moves
    if [ "$img" = l.luks ]; then o=$(lopts $img); else o=$(qopts $img); fi
    # shellcheck disable=SC2086
    QIMG_LUKS_MAX_ITERATIONS=1000 "$QIMG" map $S --image-opts "$o" >m.out 2>m.err
    assert_eq "$img: QIMG_LUKS_MAX_ITERATIONS=1000" "1 limit of 1000" \
        "$? $(grep -o 'limit of 1000' m.err)"
    # shellcheck disable=SC2086
    assert_rc "$img: QIMG_LUKS_MAX_ITERATIONS=4294967295" 0 \
        env QIMG_LUKS_MAX_ITERATIONS=4294967295 "$QIMG" map --output=json $S --image-opts "$o"
    assert_eq "$img: the passphrase is not in the image" 0 \
        "$(python3 -c 'import sys; print(open(sys.argv[1], "rb").read().count(b"hunter2"))' $img)"
done
for v in 999 x 4294967296 ""; do
    # shellcheck disable=SC2086
    QIMG_LUKS_MAX_ITERATIONS=$v "$QIMG" map $S --image-opts "$(lopts l.luks)" >m.out 2>m.err
    assert_eq "QIMG_LUKS_MAX_ITERATIONS='$v'" \
        "1 qimg: QIMG_LUKS_MAX_ITERATIONS=$v: expected a number from 1000 to 4294967295" \
        "$? $(cat m.err)"
done
# a new slot never gets more than the limit
rm -f n.luks
# shellcheck disable=SC2086
QIMG_LUKS_MAX_ITERATIONS=1000 "$QIMG" create -q -f luks $S -o key-secret=s0,iter-time=100 n.luks \
    1M >m.out 2>m.err
assert_eq "create past the limit" "1 n.luks:" "$? $(grep -o 'n.luks:' m.err)"
assert_eq "create past the limit: no file" "" "$(ls n.luks 2>/dev/null)"
# a secret that is not UTF-8
# shellcheck disable=SC2086
same_as_qemu_err map --object secret,id=s0,data=//79,format=base64 --image-opts "$(lopts l.luks)"
# shellcheck disable=SC2086
same_as_qemu_err map --object secret,id=s0,data=//79,format=base64 --image-opts "$(qopts q.qcow2)"

finish
