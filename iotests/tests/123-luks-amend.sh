#!/bin/bash
# qemu-img amend of LUKS key slots (crypto/luks.c invariant 7, qcow2 amend.c
# invariant 8, luks/luks.c invariant 6), against qemu-img/qemu-io 7.2 and
# cryptsetup, for qcow2 (encrypt.* options) and the luks format:
#  - keys added by qimg (first free slot, a chosen slot, --force over an
#    active one) open the image in qemu-io, and in cryptsetup; keys added
#    by qemu-img open it in qimg;
#  - keys erased by slot or by passphrase no longer open it, the others
#    still do; the last key is kept unless --force;
#  - every refusal in qemu-img's words, the image unchanged by it.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3 cryptsetup

S="--object secret,id=s0,data=pass0 --object secret,id=s1,data=pass1"
S="$S --object secret,id=s2,data=pass2 --object secret,id=s3,data=pass3"

# opts FMT IMG [KEY]: the --image-opts name with KEY (default s0)
opts() {
    if [ "$1" = qcow2 ]; then
        echo "driver=qcow2,file.filename=$2,encrypt.key-secret=${3:-s0}"
    else
        echo "driver=luks,file.filename=$2,key-secret=${3:-s0}"
    fi
}
# opens FMT IMG TOOL KEY...: which keys open IMG for TOOL (q: qemu-io, m:
# qimg io), as "s0:yes s1:no ..."
opens() {
    local fmt=$1 img=$2 tool=$3 out="" k
    shift 3
    for k in "$@"; do
        if [ "$tool" = q ]; then set -- "$QEMU_IO"; else set -- "$QIMG" io; fi
        # shellcheck disable=SC2086
        if "$@" $S --image-opts "$(opts "$fmt" "$img" "$k")" -c "read -P 0x5a 0 4k" 2>&1 |
            grep -q 'read 4096/4096'; then
            out="$out $k:yes"
        else
            out="$out $k:no"
        fi
    done
    echo "${out# }"
}
amend() { # amend TOOL FMT IMG OPTS [--force]: opened with key $K (s0)
    local tool=$1 fmt=$2 img=$3 o=$4
    shift 4
    if [ "$tool" = q ]; then tool=$QEMU_IMG; else tool=$QIMG; fi
    # shellcheck disable=SC2086
    "$tool" amend $S "$@" -o "$o" --image-opts "$(opts "$fmt" "$img" "${K:-s0}")" ||
        _fail "$tool amend $fmt $o"
}
q_create() { # q_create FMT NAME
    local o=key-secret=s0,iter-time=10
    [ "$1" = qcow2 ] && o=encrypt.format=luks,encrypt.key-secret=s0,encrypt.iter-time=10
    for _ in 1 2 3 4 5 6 7 8; do
        rm -f "$2"
        # shellcheck disable=SC2086
        "$QEMU_IMG" create -q -f "$1" $S -o "$o" "$2" 4M 2>.qc.err && break
        grep -q 'Unable to get accurate CPU usage' .qc.err || break
    done
    # shellcheck disable=SC2086
    "$QEMU_IO" $S --image-opts "$(opts "$1" "$2")" -c "write -P 0x5a 0 64k" >/dev/null
}
area() { # the LUKS header (area) of IMG as a file for cryptsetup
    if [ "$1" = luks ]; then
        cp "$2" "$3"
        return
    fi
    python3 - "$2" "$3" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
o = struct.unpack(">I", b[100:104])[0]
while True:
    t, l = struct.unpack(">II", b[o:o + 8])
    if t == 0x0537be77:
        off, ln = struct.unpack(">QQ", b[o + 8:o + 24])
        break
    o += 8 + ((l + 7) & ~7)
open(sys.argv[2], "wb").write(b[off:off + ln])
PY
}

for fmt in qcow2 luks; do
    if [ $fmt = qcow2 ]; then p=encrypt.; else p=; fi
    q_create $fmt img
    # qimg adds: the first free slot (1), then slot 5
    amend m $fmt img "${p}state=active,${p}new-secret=s1,${p}iter-time=10"
    amend m $fmt img "${p}state=active,${p}new-secret=s2,${p}keyslot=5,${p}iter-time=10"
    assert_eq "$fmt: keys qimg added open it in qemu-io" "s0:yes s1:yes s2:yes s3:no" \
        "$(opens $fmt img q s0 s1 s2 s3)"
    assert_eq "$fmt: the slots qemu-img sees" "true true false false false true false false" \
        "$("$QEMU_IMG" info --output=json img | python3 -c '
import json, sys
d = json.load(sys.stdin)["format-specific"]["data"]
d = d.get("encrypt", d)
print(" ".join(str(s["active"]).lower() for s in d["slots"]))')"
    area $fmt img area.img
    printf pass2 >k.txt
    assert_rc "$fmt: cryptsetup opens slot 5 with its passphrase" 0 cryptsetup luksOpen \
        --test-passphrase --key-slot 5 --key-file k.txt area.img
    # qemu-img adds slot 2, qimg opens with it
    amend q $fmt img "${p}state=active,${p}new-secret=s3,${p}iter-time=10"
    assert_eq "$fmt: a key qemu-img added opens it in qimg" "s0:yes s1:yes s2:yes s3:yes" \
        "$(opens $fmt img m s0 s1 s2 s3)"
    # erase by passphrase, then by slot
    amend m $fmt img "${p}state=inactive,${p}old-secret=s1"
    amend m $fmt img "${p}state=inactive,${p}keyslot=5"
    assert_eq "$fmt: erased keys no longer open it" "s0:yes s1:no s2:no s3:yes" \
        "$(opens $fmt img q s0 s1 s2 s3)"
    area $fmt img area.img
    printf pass1 >k.txt
    assert_rc "$fmt: cryptsetup: an erased passphrase" 2 cryptsetup luksOpen \
        --test-passphrase --key-file k.txt area.img
    # --force overwrites an active slot (slot 0: s0 becomes s1)
    amend m $fmt img "${p}state=active,${p}new-secret=s1,${p}keyslot=0,${p}iter-time=10" --force
    assert_eq "$fmt: --force over an active slot" "s0:no s1:yes s3:yes" \
        "$(opens $fmt img q s0 s1 s3)"
    # refusals, on copies, in qemu-img's words, nothing changed (slot 0
    # holds s1 now, slot 2 s3)
    K=s1
    cp img keep
    # every refusal on qcow2; on luks (the same code, no prefix) four of
    # them in make test, all under QIMG_LONG=1
    refusals=("${p}new-secret=s2" "${p}state=active,${p}new-secret=s2,${p}keyslot=2"
        "${p}state=inactive,${p}old-secret=s0" "${p}foo=1")
    [ $fmt = qcow2 ] || [ -n "${QIMG_LONG:-}" ] && refusals=("${p}new-secret=s2" "${p}state=foo" "${p}state=active" \
        "${p}state=active,${p}new-secret=s2,${p}keyslot=9" \
        "${p}state=active,${p}new-secret=s2,${p}keyslot=2" \
        "${p}state=active,${p}new-secret=nosuch" \
        "${p}state=active,${p}new-secret=s2,${p}old-secret=s1" "${p}state=inactive" \
        "${p}state=inactive,${p}new-secret=s2" "${p}state=inactive,${p}iter-time=10" \
        "${p}state=inactive,${p}keyslot=3" "${p}state=inactive,${p}old-secret=s0" \
        "${p}state=inactive,${p}keyslot=0,${p}old-secret=s3" "${p}foo=1")
    for o in "${refusals[@]}"; do
        cp keep img
        # shellcheck disable=SC2086
        same_as_qemu_err amend $S -o "$o" --image-opts "$(opts $fmt img s1)"
        assert_eq "$fmt: refused, unchanged ($o)" "$(md5sum <keep)" "$(md5sum <img)"
    done
    # the last keys: refused without --force, erased with it
    cp keep img
    amend m $fmt img "${p}state=inactive,${p}keyslot=2"
    cp img keep
    # shellcheck disable=SC2086
    same_as_qemu_err amend $S -o "${p}state=inactive,${p}keyslot=0" \
        --image-opts "$(opts $fmt img s1)"
    # shellcheck disable=SC2086
    same_as_qemu_err amend $S -o "${p}state=inactive,${p}old-secret=s1" \
        --image-opts "$(opts $fmt img s1)"
    amend m $fmt img "${p}state=inactive,${p}old-secret=s1" --force
    assert_eq "$fmt: no key opens it after the last was erased" "s0:no s1:no s2:no s3:no" \
        "$(opens $fmt img q s0 s1 s2 s3)"
    K=s0
done
# an image without encryption, an old AES one
"$QEMU_IMG" create -q -f qcow2 plain.qcow2 1M
same_as_qemu_err amend $S -o encrypt.state=active,encrypt.new-secret=s1 plain.qcow2
rm -f aes.qcow2
"$QEMU_IMG" create -q -f qcow2 $S -o encrypt.format=aes,encrypt.key-secret=s0 aes.qcow2 1M
# shellcheck disable=SC2086
same_as_qemu_err amend $S -o encrypt.state=active,encrypt.new-secret=s1 \
    --image-opts "$(opts qcow2 aes.qcow2)"

finish
