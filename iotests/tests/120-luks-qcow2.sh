#!/bin/bash
# qcow2 with encrypt.format=luks (qcow2/crypt.c, crypto/), against qemu-img
# and qemu-io 7.2 and cryptsetup, for the default algorithms (aes-256,
# xts, plain64, sha256) and for CBC with ESSIV, all with iter-time=10:
#  - images qemu-img made read back through qimg byte for byte, and the
#    reverse, after writes of every shape (whole clusters, single bytes,
#    ranges across sector and cluster boundaries, zeros) by each tool;
#    qemu-img check is clean after qimg's writes, and qimg's layout (LUKS
#    header offset, payload offset, slot offsets, allocation map) is
#    qemu-img's;
#  - create takes every encrypt.* option as qemu-img does (the info of the
#    result matches), with qemu-img's messages for bad values; algorithms
#    qemu-img has and GnuTLS does not are refused with a message; the
#    default iter-time sizes the slot from a PBKDF2 benchmark;
#  - the secret: a wrong one is qemu-img's "Invalid password, cannot
#    unlock any keyslot"; --image-opts, json: and convert's -o name it;
#  - cryptsetup, an independent reader: luksDump of the LUKS header area
#    taken out of the image, luksOpen --test-passphrase right (0) and
#    wrong (2);
#  - no plaintext of the guest's data in the file;
#  - the old AES method: qemu-img's images read and written by qimg (and
#    converted out), and created by qimg as qemu-img creates them.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3 cryptsetup

S="--object secret,id=s0,data=hunter2"
IT=encrypt.iter-time=10
opts() { echo "driver=qcow2,file.filename=$1,encrypt.key-secret=s0"; }

# qemu-img's PBKDF2 benchmark reads its CPU time in milliseconds and fails
# now and then with "Unable to get accurate CPU usage": try again.
q_create() { # q_create NAME OPTS [SIZE]
    for _ in 1 2 3 4 5 6 7 8; do
        rm -f "$1"
        # shellcheck disable=SC2086
        "$QEMU_IMG" create -q -f qcow2 $S -o "encrypt.format=luks,encrypt.key-secret=s0,$2" \
            "$1" "${3:-8M}" 2>.qc.err && return 0
        grep -q 'Unable to get accurate CPU usage' .qc.err || break
    done
    _fail "qemu-img create $1 ($2): $(cat .qc.err)"
    return 1
}
m_create() {
    rm -f "$1"
    # shellcheck disable=SC2086
    "$QIMG" create -q -f qcow2 $S -o "encrypt.format=luks,encrypt.key-secret=s0,$2" \
        "$1" "${3:-8M}" || _fail "qimg create $1 ($2)"
}
# io TOOL IMG CMD...: qemu-io (TOOL q) or qimg io (m) commands on the
# encrypted image
io() {
    local tool=$1 img=$2 args=() c
    shift 2
    for c in "$@"; do args+=(-c "$c"); done
    if [ "$tool" = q ]; then set -- "$QEMU_IO"; else set -- "$QIMG" io; fi
    # shellcheck disable=SC2086
    "$@" $S --image-opts "$(opts "$img")" "${args[@]}" >.io.out 2>&1
    if [ $? -ne 0 ] || grep -qi 'error\|fail\|pattern' .io.out; then
        _fail "$tool io on $img: ${args[*]}"
        head -5 .io.out
    fi
}
# raw IMG TOOL OUT: the guest contents, converted to raw by TOOL
raw() {
    rm -f "$3"
    # shellcheck disable=SC2086
    "$2" convert $S --image-opts "$(opts "$1")" -O raw "$3" || _fail "$2 convert $1"
}
writes=("write -P 0x11 0 64k" "write -P 0x22 70000 3" "write -P 0x33 130560 1024"
    "write -P 0x44 1048575 2" "write -P 0x55 2M 200k" "write -z 3M 64k"
    "write -P 0x66 3145729 511" "write -P 0x77 5M 1")
reads=("read -P 0x11 0 64k" "read -P 0x22 70000 3" "read -P 0x33 130560 1024"
    "read -P 0x44 1048575 2" "read -P 0x55 2M 200k" "read -P 0 3M 1"
    "read -P 0x66 3145729 511" "read -P 0x77 5M 1" "read -P 0 7M 1M")
# the header extension's LUKS area as a file of its own (cryptsetup's input)
cat >area.py <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
o = struct.unpack(">I", b[100:104])[0]
while True:
    t, l = struct.unpack(">II", b[o:o + 8])
    if t == 0x0537be77:
        off, ln = struct.unpack(">QQ", b[o + 8:o + 24])
        break
    assert t != 0, "no crypto extension"
    o += 8 + ((l + 7) & ~7)
if len(sys.argv) > 2:
    open(sys.argv[2], "wb").write(b[off:off + ln])
print(off, ln)
PY

# make test: the defaults and CBC-ESSIV (each qemu-img create of a LUKS
# image spends over a second of CPU on its PBKDF2 benchmark); QIMG_LONG=1
# (make check-long): two more sets of algorithms, the create variants, the
# iteration benchmark and the ciphers GnuTLS lacks
algs=("" "encrypt.cipher-alg=aes-128,encrypt.cipher-mode=cbc,encrypt.ivgen-alg=essiv,encrypt.hash-alg=sha1")
[ -n "${QIMG_LONG:-}" ] && algs+=("encrypt.cipher-mode=cbc,encrypt.ivgen-alg=essiv,encrypt.ivgen-hash-alg=sha256"
    "encrypt.cipher-alg=aes-128,encrypt.ivgen-alg=plain,encrypt.hash-alg=sha512")
for alg in "${algs[@]}"; do
    o=$IT${alg:+,$alg}
    # ---- qemu-img makes and writes, qimg reads ----
    q_create q.qcow2 "$o" || continue
    io q q.qcow2 "${writes[@]}"
    io m q.qcow2 "${reads[@]}"
    raw q.qcow2 "$QEMU_IMG" q-by-q.raw
    raw q.qcow2 "$QIMG" q-by-m.raw
    assert_eq "qemu-img's image ($o) read by qimg" "$(md5sum <q-by-q.raw)" \
        "$(md5sum <q-by-m.raw)"
    # ---- qimg makes and writes, qemu-img reads ----
    m_create m.qcow2 "$o"
    io m m.qcow2 "${writes[@]}"
    io q m.qcow2 "${reads[@]}"
    raw m.qcow2 "$QEMU_IMG" m-by-q.raw
    assert_eq "qimg's image ($o) read by qemu-img" "$(md5sum <q-by-q.raw)" \
        "$(md5sum <m-by-q.raw)"
    # shellcheck disable=SC2086
    assert_rc "qemu-img check of qimg's image ($o)" 0 "$QEMU_IMG" check $S \
        --image-opts "$(opts m.qcow2)"
    # the same layout: where the LUKS area lies, slots, payload, allocation
    assert_eq "LUKS area of qimg's image ($o)" "$(python3 area.py q.qcow2)" \
        "$(python3 area.py m.qcow2)"
    assert_eq "LUKS header of qimg's image ($o)" \
        "$("$QEMU_IMG" info --output=json q.qcow2 | grep -v -e uuid -e iters -e actual-size -e '"filename"')" \
        "$("$QEMU_IMG" info --output=json m.qcow2 | grep -v -e uuid -e iters -e actual-size -e '"filename"')"
    # shellcheck disable=SC2086
    assert_eq "allocation of qimg's image ($o)" \
        "$("$QEMU_IMG" map --output=json $S --image-opts "$(opts q.qcow2)")" \
        "$("$QEMU_IMG" map --output=json $S --image-opts "$(opts m.qcow2)")"
    # qemu-io rewrites part of qimg's image, qimg reads it back
    io q m.qcow2 "write -P 0x99 65000 1000"
    io m m.qcow2 "read -P 0x11 0 65000" "read -P 0x99 65000 1000" \
        "read -P 0 66000 4000"
    # no plaintext: 64 KiB of 0x11 were written, not 32 bytes of it are there
    assert_eq "no plaintext in qimg's image ($o)" 0 \
        "$(python3 -c 'import sys; print(open(sys.argv[1],"rb").read().count(b"\x11"*32))' m.qcow2)"
    # ---- cryptsetup reads the header qimg wrote ----
    python3 area.py m.qcow2 m-area.img >/dev/null
    python3 area.py q.qcow2 q-area.img >/dev/null
    keep='^(Version|Cipher|Hash|Payload|MK bits|Key Slot)|Key material|AF stripes'
    assert_eq "cryptsetup luksDump of qimg's header ($o)" \
        "$(cryptsetup luksDump q-area.img | grep -E "$keep")" \
        "$(cryptsetup luksDump m-area.img | grep -E "$keep")"
    printf hunter2 >pass.txt
    printf hunter3 >bad.txt
    assert_rc "cryptsetup: the right passphrase ($o)" 0 cryptsetup luksOpen \
        --test-passphrase --key-file pass.txt m-area.img
    assert_rc "cryptsetup: a wrong passphrase ($o)" 2 cryptsetup luksOpen \
        --test-passphrase --key-file bad.txt m-area.img
done

# ---- the old AES method: read (to convert out), written and made ----
rm -f aes.qcow2
# shellcheck disable=SC2086
"$QEMU_IMG" create -q -f qcow2 $S -o encrypt.format=aes,encrypt.key-secret=s0 aes.qcow2 4M
io q aes.qcow2 "write -P 0x31 0 100k" "write -P 0x32 1000001 7" "write -P 0x33 2M 64k"
io m aes.qcow2 "read -P 0x31 0 100k" "read -P 0x32 1000001 7" "write -P 0x34 3M 3"
io q aes.qcow2 "read -P 0x34 3M 3" "read -P 0x33 2M 64k"
raw aes.qcow2 "$QEMU_IMG" aes-q.raw
raw aes.qcow2 "$QIMG" aes-m.raw
assert_eq "the old AES method read by qimg" "$(md5sum <aes-q.raw)" "$(md5sum <aes-m.raw)"
rm -f aes-out.qcow2
# shellcheck disable=SC2086
"$QIMG" convert $S --image-opts "$(opts aes.qcow2)" -O qcow2 \
    -o encrypt.format=luks,encrypt.key-secret=s0,$IT aes-out.qcow2
raw aes-out.qcow2 "$QEMU_IMG" aes-out.raw
assert_eq "an AES image converted to LUKS" "$(md5sum <aes-q.raw)" "$(md5sum <aes-out.raw)"
# shellcheck disable=SC2086
assert_rc "qemu-img check after qimg's writes to an AES image" 0 "$QEMU_IMG" check $S \
    --image-opts "$(opts aes.qcow2)"
# made by qimg (qcow2/create.c invariant 6; 083 compares the bytes with
# qemu-img's): qemu-io writes it, qimg reads it
for o in encrypt.format=aes encryption=on; do
    rm -f e.qcow2
    # shellcheck disable=SC2086
    assert_rc "create $o" 0 "$QIMG" create -q -f qcow2 $S -o "$o,encrypt.key-secret=s0" e.qcow2 1M
    io q e.qcow2 "write -P 0x35 4k 60k"
    io m e.qcow2 "read -P 0x35 4k 60k" "read -P 0 0 4k"
done

# ---- the secret ----
W="--object secret,id=s0,data=wrong"
for img in q m; do
    # shellcheck disable=SC2086
    same_as_qemu_err check $W --image-opts "$(opts $img.qcow2)"
    # shellcheck disable=SC2086
    same_as_qemu_err convert $W --image-opts "$(opts $img.qcow2)" -O raw x.raw
    # shellcheck disable=SC2086
    same_as_qemu_err map $S "json:{\"driver\":\"qcow2\",\"file\":{\"filename\":\"$img.qcow2\"},\"encrypt\":{\"key-secret\":\"s0\"}}"
done
# convert into an encrypted image names the key with -o, as Nova and Cinder do
head -c 3M /dev/urandom >src.raw
rm -f c.qcow2
# shellcheck disable=SC2086
"$QIMG" convert $S -O qcow2 -o encrypt.format=luks,encrypt.key-secret=s0,$IT src.raw c.qcow2
raw c.qcow2 "$QEMU_IMG" c.raw
assert_eq "convert into an encrypted image" "$(md5sum <src.raw)" "$(md5sum <c.raw)"
# shellcheck disable=SC2086
assert_rc "convert: no compression with encryption" 1 "$QIMG" convert $S -c -O qcow2 \
    -o encrypt.format=luks,encrypt.key-secret=s0 src.raw c2.qcow2
assert_eq "convert -c: qemu-img's words" \
    "qimg: Compression and encryption not supported at the same time" "$(cat .out)"

# ---- create: every option, qemu-img's messages ----
for o in encrypt.cipher-alg=foo encrypt.cipher-mode=foo encrypt.ivgen-alg=foo \
    encrypt.ivgen-hash-alg=foo encrypt.hash-alg=foo encrypt.iter-time=foo \
    encrypt.iter-time=1e3 encrypt.iter-time=99999999999999999999 \
    encrypt.iter-time=18446744073709551615 encrypt.ivgen-alg=essiv,encrypt.ivgen-hash-alg=sha1 \
    encrypt.foo=1; do
    rm -f e.qcow2
    # shellcheck disable=SC2086
    same_as_qemu_err create -q -f qcow2 $S -o encrypt.format=luks,encrypt.key-secret=s0,$o e.qcow2 1M
done
variants=("encrypt.hash-alg=md5")
[ -n "${QIMG_LONG:-}" ] && variants+=("encrypt.hash-alg=sha224,encrypt.ivgen-hash-alg=sha1"
    "encrypt.cipher-mode=cbc,encrypt.ivgen-alg=plain64,encrypt.hash-alg=sha384" "encrypt.iter-time=0")
for o in "${variants[@]}"; do
    q_create q.qcow2 "$IT,$o" 1M || continue
    m_create m.qcow2 "$IT,$o" 1M
    assert_eq "create -o $o: the header qemu-img writes" \
        "$("$QEMU_IMG" info q.qcow2 | grep -v -e uuid -e iters -e 'disk size' -e '^image')" \
        "$("$QEMU_IMG" info m.qcow2 | grep -v -e uuid -e iters -e 'disk size' -e '^image')"
    io m m.qcow2 "write -P 0xab 4k 8k"
    io q m.qcow2 "read -P 0xab 4k 8k"
done
# AES-192: its key material is not a whole number of sectors; qemu-img 7.2
# aborts on it, qimg pads it as cryptsetup does (luks.c invariant 1), and
# cryptsetup opens it
m_create m.qcow2 "$IT,encrypt.cipher-alg=aes-192,encrypt.cipher-mode=cbc,encrypt.ivgen-alg=essiv,encrypt.ivgen-hash-alg=sha256,encrypt.hash-alg=sha224" 1M
io m m.qcow2 "write -P 0xab 4k 8k" "read -P 0xab 4k 8k"
python3 area.py m.qcow2 m-area.img >/dev/null
assert_eq "aes-192: cryptsetup reads the header" "aes cbc-essiv:sha256 192" \
    "$(cryptsetup luksDump m-area.img | awk '/^Cipher name/ {n=$3} /^Cipher mode/ {m=$3} /^MK bits/ {b=$3} END {print n, m, b}')"
assert_rc "aes-192: cryptsetup opens slot 0" 0 cryptsetup luksOpen --test-passphrase \
    --key-file pass.txt m-area.img
# what GnuTLS does not have: qemu-img (nettle) makes them, qimg says why not
for o in "encrypt.cipher-alg=twofish-256|Cipher 'twofish-256' is not supported by qimg (GnuTLS offers AES only)" \
    "encrypt.cipher-alg=aes-128,encrypt.cipher-mode=ctr|Cipher mode 'ctr' with 'aes-128' is not supported by qimg (GnuTLS offers AES in CBC mode and AES-128/256 in XTS mode)" \
    "encrypt.hash-alg=ripemd160|Hash algorithm 'ripemd160' is not supported by qimg (GnuTLS does not have it)"; do
    rm -f e.qcow2
    # shellcheck disable=SC2086
    "$QIMG" create -q -f qcow2 $S -o "encrypt.format=luks,encrypt.key-secret=s0,$IT,${o%%|*}" \
        e.qcow2 1M >m.out 2>m.err
    assert_eq "create ${o%%|*}: refused" "1 qimg: e.qcow2: ${o#*|}" "$? $(cat m.err)"
    assert_eq "create ${o%%|*}: nothing left" "" "$(ls e.qcow2 2>/dev/null)"
done
if [ -n "${QIMG_LONG:-}" ]; then
    q_create tw.qcow2 "$IT,encrypt.cipher-alg=twofish-256" 1M
    # shellcheck disable=SC2086
    "$QIMG" check $S --image-opts "$(opts tw.qcow2)" >m.out 2>m.err
    assert_eq "open twofish: refused with the reason" \
        "1 qimg: Could not open 'driver=qcow2,file.filename=tw.qcow2,encrypt.key-secret=s0': Cipher 'twofish-256' is not supported by qimg (GnuTLS offers AES only)" \
        "$? $(cat m.err)"
    # the default iter-time (2000 ms) sizes the slot by a benchmark: qemu-img's
    # count and qimg's are within a factor of 8 of each other
    q_create q.qcow2 "encrypt.iter-time=200" 1M
    m_create m.qcow2 "encrypt.iter-time=200" 1M
    qi=$("$QEMU_IMG" info --output=json q.qcow2 | python3 -c 'import json,sys; print(json.load(sys.stdin)["format-specific"]["data"]["encrypt"]["slots"][0]["iters"])')
    mi=$("$QEMU_IMG" info --output=json m.qcow2 | python3 -c 'import json,sys; print(json.load(sys.stdin)["format-specific"]["data"]["encrypt"]["slots"][0]["iters"])')
    assert_eq "iter-time=200: slot 0 iterations $mi near qemu-img's $qi" 1 \
        "$(python3 -c "print(int($qi / 8 <= $mi <= $qi * 8))")"
fi

finish
