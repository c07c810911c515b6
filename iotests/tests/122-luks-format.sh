#!/bin/bash
# The luks image format (luks/luks.c): a LUKS1 header and the encrypted
# payload in one file, against qemu-img/qemu-io 7.2 and cryptsetup:
#  - probed as "luks"; info (human, JSON, with and without the key) as
#    qemu-img's, the virtual size the file less the payload offset;
#  - made by each tool, read and written by the other byte for byte,
#    writes of every alignment (partial sectors: luks.c invariant 2);
#  - convert into -O luks (Cinder's form) and out of it, map, compare,
#    measure, resize, check (unsupported, as qemu-img);
#  - the key: missing, unknown, wrong -- qemu-img's messages; create's
#    option checks as qemu-img's, and a failed create leaves no file;
#  - cryptsetup luksDump and luksOpen --test-passphrase on qimg's file;
#    the master key cryptsetup unlocks from qimg's file decrypts its
#    payload (a decryptor of our own: python3-cryptography's AES) to what
#    qemu-img reads; a volume cryptsetup formats (LUKS1) is written by qimg
#    and read by qemu-io (device-mapper is not needed for either);
#  - never-written areas read as decrypted zeros (not zeros), as qemu-img's.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3 cryptsetup
python3 -c 'import cryptography' 2>/dev/null || missing "python3-cryptography not found"

S="--object secret,id=s0,data=hunter2"
IT=iter-time=10
opts() { echo "driver=luks,file.filename=$1,key-secret=s0"; }
q_create() { # q_create NAME OPTS SIZE
    for _ in 1 2 3 4 5 6 7 8; do
        rm -f "$1"
        # shellcheck disable=SC2086
        "$QEMU_IMG" create -q -f luks $S -o "key-secret=s0,$2" "$1" "$3" 2>.qc.err && return 0
        grep -q 'Unable to get accurate CPU usage' .qc.err || break
    done
    _fail "qemu-img create $1 ($2): $(cat .qc.err)"
    return 1
}
io() {
    local tool=$1 img=$2 args=() c
    shift 2
    for c in "$@"; do args+=(-c "$c"); done
    if [ "$tool" = q ]; then set -- "$QEMU_IO"; else set -- "$QIMG" io; fi
    # shellcheck disable=SC2086
    "$@" $S --image-opts "$(opts "$img")" "${args[@]}" >.io.out 2>&1
    local rc=$? out
    out=$(<.io.out)
    out=${out,,} # (grep -qi 'error\|fail\|pattern', without a grep)
    if [ $rc -ne 0 ] || [[ "$out" == *error* || "$out" == *fail* || "$out" == *pattern* ]]; then
        _fail "$tool io on $img: ${args[*]}"
        head -5 .io.out
    fi
}
raw() { # raw TOOL IMG OUT
    rm -f "$3"
    # shellcheck disable=SC2086
    "$1" convert $S --image-opts "$(opts "$2")" -O raw "$3" || _fail "$1 convert $2"
}
writes=("write -P 0x11 0 64k" "write -P 0x22 70000 3" "write -P 0x33 130560 1024"
    "write -P 0x44 1048575 2" "write -z 2M 64k" "write -P 0x55 3M 200k")
reads=("read -P 0x11 0 64k" "read -P 0x22 70000 3" "read -P 0x33 130560 1024"
    "read -P 0x44 1048575 2" "read -P 0 2M 64k" "read -P 0x55 3M 200k")
mask='uuid|iters|disk size|actual-size|"filename"|^image:'
# decrypt.py FILE MKDUMP: the payload of a LUKS1 file, decrypted with the
# master key of cryptsetup's "MK dump" (AES XTS-plain64 or CBC-ESSIV, the
# IV the sector number from the payload's start)
cat >decrypt.py <<'PY'
import hashlib, re, struct, sys
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
b = open(sys.argv[1], "rb").read()
dump = open(sys.argv[2]).read()
mk = bytes.fromhex("".join(re.search(r"MK dump:\s*((?:[0-9a-f]{2}\s+)+)", dump).group(1).split()))
mode = b[40:72].rstrip(b"\0").decode()
payload = struct.unpack(">I", b[104:108])[0] * 512
out = sys.stdout.buffer
if mode.startswith("cbc-essiv:"):
    salt = hashlib.new(mode.split(":")[1], mk).digest()
    essiv = Cipher(algorithms.AES(salt), modes.ECB()).encryptor()
for n, k in enumerate(range(payload, len(b), 512)):
    iv = struct.pack("<Q", n) + bytes(8)
    if mode == "xts-plain64":
        m = modes.XTS(iv)
    else:
        m = modes.CBC(essiv.update(iv))
    d = Cipher(algorithms.AES(mk), m).decryptor()
    out.write(d.update(b[k:k + 512]) + d.finalize())
PY

for alg in "" ",cipher-alg=aes-128,cipher-mode=cbc,ivgen-alg=essiv,hash-alg=sha1"; do
    o=$IT$alg
    q_create q.luks "$o" 4M || continue
    rm -f m.luks
    # shellcheck disable=SC2086
    "$QIMG" create -q -f luks $S -o "key-secret=s0,$o" m.luks 4M || _fail "qimg create ($o)"
    assert_eq "file size ($o)" "$(stat -c %s q.luks)" "$(stat -c %s m.luks)"
    # (the default cipher's header: qemu-img's file less the disk)
    [ -z "$alg" ] && q_header=$(($(stat -c %s q.luks) - 4 * 1024 * 1024))
    for fmt in human json; do
        assert_eq "info --output=$fmt ($o)" \
            "$("$QEMU_IMG" info --output=$fmt q.luks | grep -Ev "$mask")" \
            "$("$QIMG" info --output=$fmt m.luks | grep -Ev "$mask")"
    done
    same_as_qemu_err info --output=json m.luks
    # shellcheck disable=SC2086
    same_as_qemu_err info $S --image-opts "$(opts m.luks)"
    io q q.luks "${writes[@]}"
    io m m.luks "${writes[@]}"
    io m q.luks "${reads[@]}"
    io q m.luks "${reads[@]}"
    raw "$QEMU_IMG" q.luks q-q.raw
    raw "$QIMG" q.luks q-m.raw
    raw "$QEMU_IMG" m.luks m-q.raw
    # (never-written areas included: decrypted zeros, not zeros)
    assert_eq "qemu-img's image read by qimg ($o)" "$(md5sum <q-q.raw)" "$(md5sum <q-m.raw)"
    assert_eq "never-written areas are not zeros ($o)" 1 \
        "$(tail -c 100k q-m.raw | python3 -c 'import sys; print(int(any(sys.stdin.buffer.read())))')"
    # qimg's image: everything written, then read back by qemu-img
    io m m.luks "write -P 0x01 0 4M" "${writes[@]}"
    raw "$QEMU_IMG" m.luks m-q.raw
    io q q.luks "write -P 0x01 0 4M" "${writes[@]}"
    raw "$QEMU_IMG" q.luks q-q.raw
    assert_eq "qimg's image read by qemu-img ($o)" "$(md5sum <q-q.raw)" "$(md5sum <m-q.raw)"
    assert_eq "no plaintext in qimg's file ($o)" 0 \
        "$(python3 -c 'import sys; print(open(sys.argv[1],"rb").read().count(b"\x11"*32))' m.luks)"
    # cryptsetup: the header and slot 0
    keep='^(Version|Cipher|Hash|Payload|MK bits|Key Slot)|Key material|AF stripes'
    assert_eq "cryptsetup luksDump ($o)" "$(cryptsetup luksDump q.luks | grep -E "$keep")" \
        "$(cryptsetup luksDump m.luks | grep -E "$keep")"
    printf hunter2 >pass.txt
    printf hunter3 >bad.txt
    assert_rc "cryptsetup: the right passphrase ($o)" 0 cryptsetup luksOpen \
        --test-passphrase --key-file pass.txt m.luks
    assert_rc "cryptsetup: a wrong passphrase ($o)" 2 cryptsetup luksOpen \
        --test-passphrase --key-file bad.txt m.luks
    # cryptsetup's master key (from slot 0 of qimg's file) decrypts the payload
    cryptsetup luksDump -q --dump-master-key --key-file pass.txt m.luks >mk.txt 2>&1 ||
        _fail "cryptsetup --dump-master-key ($o): $(cat mk.txt)"
    assert_eq "cryptsetup's key decrypts qimg's payload ($o)" "$(md5sum <m-q.raw)" \
        "$(python3 decrypt.py m.luks mk.txt | md5sum)"
    # a volume cryptsetup formats: qimg writes it, qemu-io reads it
    case $alg in
    "") cs=(-c aes-xts-plain64 -s 512 -h sha256) ;;
    *) cs=(-c aes-cbc-essiv:sha256 -s 128 -h sha1) ;;
    esac
    rm -f c.luks
    truncate -s 6M c.luks
    assert_rc "cryptsetup luksFormat ($o)" 0 cryptsetup luksFormat -q --type luks1 \
        --pbkdf-force-iterations 1000 "${cs[@]}" --key-file pass.txt c.luks
    io m c.luks "write -P 0x01 0 2M" "${writes[@]}"
    io q c.luks "read -P 0x01 512k 4k" "${reads[@]}"
    raw "$QEMU_IMG" c.luks c-q.raw
    raw "$QIMG" c.luks c-m.raw
    assert_eq "cryptsetup's volume read by qimg and qemu-img ($o)" "$(md5sum <c-q.raw)" \
        "$(md5sum <c-m.raw)"
done

# ---- commands ----
# shellcheck disable=SC2086
same_as_qemu_err map $S --output=json --image-opts "$(opts m.luks)"
# shellcheck disable=SC2086
same_as_qemu_err map $S --image-opts "$(opts m.luks)"
# shellcheck disable=SC2086
same_as_qemu_err check $S --image-opts "$(opts m.luks)"
# shellcheck disable=SC2086
same_as_qemu_err compare $S --image-opts "$(opts m.luks)" "$(opts q.luks)"
# shellcheck disable=SC2086
same_as_qemu_err compare $S --image-opts "$(opts m.luks)" driver=raw,file.filename=m-q.raw
# (each qemu-img measure -O luks runs its PBKDF2 benchmark and then the
# key slot's PBKDF2: one in make test, with iter-time=10 (2.5 s of CPU
# rather than 4.7 at the default 2 s; the size is the same for any
# iteration count), the others, the default included, under QIMG_LONG=1)
# shellcheck disable=SC2086
same_as_qemu_err_kdf measure $S -O luks -o key-secret=s0,$IT --size 1G
if [ -n "${QIMG_LONG:-}" ]; then
    for o in "" ",cipher-alg=aes-128,cipher-mode=cbc"; do
        # shellcheck disable=SC2086
        same_as_qemu_err_kdf measure $S -O luks -o key-secret=s0$o --size 1G
        # shellcheck disable=SC2086
        same_as_qemu_err_kdf measure $S -O luks -o key-secret=s0$o -f raw m-q.raw
    done
fi
same_as_qemu_err_kdf measure -O luks --size 1G
# convert into luks (Cinder: raw volumes -O luks) and out of it: qemu-img
# reads qimg's file as the source, and the file has the size of qemu-img's
# convert (QIMG_LONG=1), in make test of qemu-img's create of the default
# cipher above (its header, as a convert writes it, and the 3 MiB):
# qemu-img's convert -O luks costs 2.8 s of CPU (its PBKDF2 benchmark)
head -c 3M /dev/urandom >src.raw
convert_tools="m"
[ -n "${QIMG_LONG:-}" ] && convert_tools="q m"
for t in $convert_tools; do
    rm -f c-$t.luks
    if [ $t = q ]; then tool=$QEMU_IMG; else tool=$QIMG; fi
    for _ in 1 2 3 4 5 6; do
        # shellcheck disable=SC2086
        "$tool" convert $S -O luks -o key-secret=s0,$IT src.raw c-$t.luks 2>.c.err && break
        grep -q 'accurate CPU' .c.err || { _fail "$t convert -O luks: $(cat .c.err)"; break; }
    done
    raw "$QEMU_IMG" c-$t.luks c-$t.raw
done
assert_eq "convert -O luks" "$(md5sum <src.raw)" "$(md5sum <c-m.raw)"
if [ -n "${QIMG_LONG:-}" ]; then
    assert_eq "convert -O luks: the file" "$(stat -c %s c-q.luks)" "$(stat -c %s c-m.luks)"
fi
assert_eq "convert -O luks: the file as qemu-img's create's" "$((q_header + 3 * 1024 * 1024))" \
    "$(stat -c %s c-m.luks)"
# resize, up and down
for t in q m; do
    cp m.luks rs-$t.luks
    if [ $t = q ]; then tool=$QEMU_IMG; else tool=$QIMG; fi
    # shellcheck disable=SC2086
    "$tool" resize -q $S --image-opts "$(opts rs-$t.luks)" 6M || _fail "$t resize 6M"
    # shellcheck disable=SC2086
    "$tool" resize -q $S --shrink --image-opts "$(opts rs-$t.luks)" 3M || _fail "$t shrink"
done
assert_eq "resize" "$(stat -c %s rs-q.luks)" "$(stat -c %s rs-m.luks)"
same_as_qemu_err info rs-m.luks

# ---- the key, create's checks ----
same_as_qemu_err check --image-opts driver=luks,file.filename=m.luks
same_as_qemu_err check --image-opts "$(opts m.luks)"
# shellcheck disable=SC2086
same_as_qemu_err check --object secret,id=s0,data=wrong --image-opts "$(opts m.luks)"
same_as_qemu_err info -f luks src.raw
head -c 100000 m.luks >short.luks
same_as_qemu_err info short.luks
for o in "" key-secret=nosuch cipher-alg=foo,key-secret=s0 key-secret=s0,iter-time=x \
    key-secret=s0,foo=1 key-secret=s0,cipher-mode=cbc,ivgen-alg=essiv,ivgen-hash-alg=sha1; do
    rm -f e.luks
    # shellcheck disable=SC2086
    same_as_qemu_err create -f luks $S ${o:+-o $o} e.luks 1M
    assert_eq "no file left ($o)" "" "$(ls e.luks 2>/dev/null)"
done

finish
