#!/bin/bash
# The format table (api/formats.c): a file probes as the format qemu-img
# probes it as (vdi, qed, vhdx, dynamic vpc and LUKS open as such); one
# whose magic names a format qimg does not read is refused naming that
# format (never read as raw), by every command and with -f; a
# fixed VHD (footer only) probes as raw, as in qemu-img; a probed raw
# image's block 0 cannot be made to probe as any of them (qemu-io's rule).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

# Images qemu-img makes: formats qimg does not read, and vdi, qed, vhdx and
# vpc, which it reads (their table entries are drivers).
for f in vdi qed qcow parallels vhdx vpc; do
    "$QEMU_IMG" create -q -f $f img.$f 4M || exit 1
done
# Hand-built headers of formats qemu-img cannot create (QEMU's probes).
python3 - <<'EOF'
import struct
def w(name, head, size=1 << 20):
    b = bytearray(size)
    b[:len(head)] = head
    open(name, "wb").write(b)
h = bytearray(512)
h[0:22] = b"Bochs Virtual HD Image"; h[32:39] = b"Redolog"; h[48:55] = b"Growing"
struct.pack_into("<I", h, 64, 0x20000)
w("hand.bochs", h)
w("hand.cloop", b"#!/bin/sh\n#V2.0 Format\nmodprobe cloop file=$0 && "
  b"mount -r -t iso9660 /dev/cloop $1\n")
w("hand.dmg", b"")                      # dmg is probed by its name
# LUKS 1 by hand: qemu-img's LUKS creation times PBKDF2, which fails on a
# busy machine ("Unable to get accurate CPU usage")
w("img.luks", b"LUKS\xba\xbe\x00\x01")
w("luks2.img", b"LUKS\xba\xbe\x00\x02")  # QEMU 7.2 probes LUKS 1 only: raw
w("bochs-v3.img", bytes(h[:64]) + struct.pack("<I", 0x30000))  # not bochs: raw
w("short.qcow", struct.pack(">II", 0x514649fb, 1), 40)  # < 48 bytes: raw
EOF

probed_format() { # the format qemu-img's probe picks (its message or info)
    local out
    if out=$("$QEMU_IMG" info --output=json "$1" 2>/dev/null); then
        printf '%s' "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["format"])'
    fi
}

for spec in img.vdi:vdi img.qed:qed img.qcow:qcow img.parallels:parallels \
    img.vhdx:vhdx img.vpc:vpc; do
    img=${spec%%:*} fmt=${spec#*:}
    assert_eq "qemu-img probes $img as $fmt" "$fmt" "$(probed_format "$img")"
done
# the hand-built LUKS header fails in qemu-img's LUKS driver
assert_rc "qemu-img opens img.luks as LUKS" 0 \
    bash -c "'$QEMU_IMG' info img.luks 2>&1 | grep -q 'LUKS payload'"

# Refused naming the format, by each command, probed or named with -f.
for spec in img.qcow:qcow img.parallels:parallels hand.bochs:bochs hand.cloop:cloop \
    hand.dmg:dmg; do
    img=${spec%%:*} fmt=${spec#*:}
    want="qimg: Could not open '$img': the '$fmt' format"
    for cmd in "info" "info --output=json" "map" "check" "convert -O raw" \
        "info -f $fmt" "compare -f $fmt -F raw"; do
        extra=
        case $cmd in convert*) extra=out.raw ;; compare*) extra=img.vdi ;; esac
        rm -f out.raw
        # shellcheck disable=SC2086
        "$QIMG" $cmd "$img" $extra >out.txt 2>err.txt
        rc=$?
        _checks=$((_checks + 1))
        if [ $rc = 0 ] || ! grep -q "^$want (.*) is not supported by qimg" err.txt; then
            _fail "qimg $cmd $img: rc $rc, expected the refusal of '$fmt'"
            cat err.txt
        fi
        [ -e out.raw ] && _fail "qimg $cmd $img wrote a target"
    done
done
assert_rc "io on a parallels image" 1 "$QIMG" io -c 'read 0 512' img.parallels
grep -q "the 'parallels' format (Parallels) is not supported" "$SCRATCH/.out" ||
    _fail "io's refusal does not name parallels"
# LUKS 1 is read by the luks driver (iotest 122): the broken header gets
# qemu-img's errors
same_as_qemu_err info img.luks
same_as_qemu_err map img.luks
# Creating one is refused too (through the API, as measure)
assert_rc "measure -O parallels" 1 "$QIMG" measure -O parallels --size 1M
# The formats qimg reads (vdi, qed, vhdx, dynamic vpc) open as probed, with
# the info qemu-img prints.
for img in img.vdi img.qed img.vhdx img.vpc; do
    same_as_qemu info --output=json "$img"
done
# ... and the file named with -f raw reads as raw, as asked.
same_as_qemu info --output=json -f raw img.vdi

# What qemu-img reads as raw, qimg reads as raw (same info).
"$QEMU_IMG" create -q -f vpc -o subformat=fixed fixed.vpc 4M || exit 1
for img in fixed.vpc luks2.img bochs-v3.img short.qcow; do
    same_as_qemu info --output=json "$img"
    same_as_qemu info "$img"
done
# A fixed VHD converts byte for byte as raw, footer included.
"$QIMG" convert -O raw fixed.vpc fixed.out 2>/dev/null
"$QEMU_IMG" convert -O raw fixed.vpc fixed.qout
assert_rc "fixed VHD converts as raw" 0 cmp fixed.out fixed.qout

# Block 0 of a probed raw image: a header of an unread format is refused
# (as by qemu-io); named raw, it is written.
head -c 512 img.vpc >vpc.head
head -c 512 img.vdi >vdi.head
for head in vpc.head vdi.head; do
    truncate -s 1M probed.raw
    "$QIMG" io -c "write -s $head 0 512" probed.raw >m.out 2>&1
    "$QEMU_IO" -c "write -s $head 0 512" probed.raw >q.out 2>&1
    assert_eq "qimg io refuses $head at block 0 as qemu-io does" \
        "$(grep -c 'Operation not permitted' q.out)" \
        "$(grep -c 'Operation not permitted' m.out)"
    assert_eq "block 0 unchanged" "$(head -c 512 /dev/zero | od -An | head -1)" \
        "$(head -c 512 probed.raw | od -An | head -1)"
    "$QIMG" io -f raw -c "write -s $head 0 512" probed.raw >/dev/null 2>&1
    assert_rc "written with -f raw" 0 cmp -n 512 probed.raw "$head"
    rm -f probed.raw
done

finish
