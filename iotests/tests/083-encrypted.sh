#!/bin/bash
# Encrypted qcow2 images and --object secret (crypto/luks-codec.c,
# qcow2.c invariant 10, qcow2/crypt.c, tools/objects.c) against qemu-img
# on the same inputs:
#  - info (human and JSON, with and without --backing-chain, -U) of LUKS
#    images with several cipher settings, a v2 one, one with a data file,
#    and images of the old AES method: the same bytes;
#  - corrupted LUKS headers: qemu-img's message where it refuses, and a
#    clear error (never a crash) where qimg is stricter (slot offset near
#    2^32 sectors, qemu-img's 32-bit sum wraps) or qemu-img crashes (no
#    crypto header extension);
#  - every other command on an encrypted image without its secret is
#    refused as qemu-img refuses it, and the file is left unchanged;
#  - encrypt.key-secret in --image-opts and json: names: info as
#    qemu-img's (no secret is looked up); other commands refuse a missing
#    secret in qemu-img's words and run as qemu-img's with an existing one
#    (120 and 121 test the data paths);
#  - --object: each of qemu-img's error cases in its words; a valid,
#    unreferenced secret is accepted; a reference to a missing secret is
#    qemu-img's error; an AES image is created as qemu-img creates it.
# make test has qemu-img create two of the seven LUKS images (its create
# costs 2.5 s of CPU each; the others: see mk_enc's callers);
# QIMG_LONG=1: qemu-img all.
. "${0%/*}/../common.sh"
requires qimg qemu-img python3

# patch IMG WHERE FMT VALUE: WHERE is L+n (into the LUKS header), E+n (into
# the crypto header extension's data) or an offset in the file; FMT a
# struct code or s (a string, Python escapes).
cat >patch.py <<'PY'
import shutil, struct, sys
def patch(f, where, fmt, val):
    b = bytearray(open(f, "rb").read())
    def ext():
        o = struct.unpack(">I", b[100:104])[0]
        while True:
            t, l = struct.unpack(">II", b[o:o + 8])
            if t == 0x0537be77:
                return o + 8
            if t == 0:
                sys.exit("no crypto extension")
            o += 8 + ((l + 7) & ~7)
    if where[0] == "L":
        off = struct.unpack(">Q", b[ext():ext() + 8])[0] + int(where[1:], 0)
    elif where[0] == "E":
        off = ext() + int(where[1:], 0)
    else:
        off = int(where, 0)
    if fmt == "s":
        v = val.encode().decode("unicode_escape").encode("latin1")
    else:
        v = struct.pack(">" + fmt, int(val, 0))
    b[off:off + len(v)] = v
    open(f, "wb").write(b)
if sys.argv[1] == "--list":
    # --list SRC LIST: each line "OUT WHERE FMT VALUE...": OUT is a patched
    # copy of SRC
    for line in open(sys.argv[3]):
        w = line.split()
        shutil.copyfile(sys.argv[2], w[0])
        for k in range(1, len(w), 3):
            patch(w[0], *w[k:k + 3])
else:
    patch(*sys.argv[1:5])
PY

# qemu-img create of a LUKS image benchmarks PBKDF2 with the thread's CPU
# time, which a coarse clock can read as zero ("Unable to get accurate CPU
# usage"): try again.  (TOOL=qimg: made by qimg create instead, see below.)
mk_enc() {
    local name=$1 opts=$2 tool=$QEMU_IMG
    [ "${TOOL:-}" = qimg ] && tool=$QIMG
    for _ in 1 2 3 4 5 6 7 8; do
        rm -f "$name"
        "$tool" create -q -f qcow2 --object secret,id=sec0,data=123456 \
            -o "encrypt.key-secret=sec0,$opts" "$name" 16M \
            2>/dev/null && return 0
    done
    _fail "$tool could not create $name ($opts)"
    return 1
}

# qemu-img's benchmarks take 2.5 s of CPU for each LUKS image (iter-time
# 10 or not): in make test qemu-img makes two (the default cipher and
# serpent-128 cbc-essiv:md5, whose layout differs: a 128-bit key's);
# the twofish and serpent-256 images are the default one with the names of
# their cipher, mode and hash in its header, as qemu-img writes them (they
# differ from a made one only there, in the salts, uuid and iterations);
# qimg makes the v2 image, the one with a data file and the aes-128
# cbc-essiv one, the base of the corrupted headers (of serpent-cbc's
# layout; qemu-img's info of them equal to qimg's shows that qemu-img
# reads them as qimg does); QIMG_LONG=1: qemu-img makes them all.
L=encrypt.format=luks,encrypt.iter-time=10
mk_enc luks.qcow2 $L
cbc_tool=qimg
[ -z "${QIMG_LONG:-}" ] || cbc_tool=
TOOL=$cbc_tool mk_enc cbc.qcow2 $L,encrypt.cipher-alg=aes-128,encrypt.cipher-mode=cbc,encrypt.ivgen-alg=essiv,encrypt.ivgen-hash-alg=sha256,encrypt.hash-alg=sha1
mk_enc serpent-cbc.qcow2 $L,encrypt.cipher-alg=serpent-128,encrypt.cipher-mode=cbc,encrypt.ivgen-alg=essiv,encrypt.ivgen-hash-alg=md5
if [ -n "${QIMG_LONG:-}" ]; then
    mk_enc tw.qcow2 $L,encrypt.cipher-alg=twofish-256,encrypt.ivgen-alg=plain,encrypt.hash-alg=sha512
    # (192-bit keys make qemu-img 7.2 create abort: not tried)
    mk_enc serpent.qcow2 $L,encrypt.cipher-alg=serpent-256
    mk_enc v2.qcow2 $L,compat=0.10
    mk_enc df.qcow2 $L,data_file=df.raw
else
    printf '%s\n' "tw.qcow2 L8 s twofish\\0 L40 s xts-plain\\0 L72 s sha512\\0" \
        "serpent.qcow2 L8 s serpent\\0" >variants.list
    python3 patch.py --list luks.qcow2 variants.list || _fail "patch: $(cat variants.list)"
    TOOL=qimg mk_enc v2.qcow2 $L,compat=0.10
    TOOL=qimg mk_enc df.qcow2 $L,data_file=df.raw
fi
mk_enc aes.qcow2 encrypt.format=aes
mk_enc aes-on.qcow2 encryption=on
# the old method by hand too: crypt_method 1 patched into a plain header
"$QEMU_IMG" create -q -f qcow2 crafted.qcow2 16M
python3 -c '
import struct, sys
with open(sys.argv[1], "r+b") as f:
    f.seek(32); f.write(struct.pack(">I", 1))' crafted.qcow2
"$QEMU_IMG" create -q -f qcow2 -b luks.qcow2 -F qcow2 ov.qcow2
"$QEMU_IMG" create -q -f qcow2 -b aes.qcow2 -F qcow2 ov-aes.qcow2

# ---- info ----
for img in luks cbc tw serpent serpent-cbc v2 df aes aes-on crafted; do
    same_as_qemu_err info $img.qcow2
    same_as_qemu_err info --output=json $img.qcow2
    same_as_qemu_err info -U --output=json $img.qcow2
done
for img in ov ov-aes; do
    same_as_qemu_err info --backing-chain $img.qcow2
    same_as_qemu_err info --backing-chain --output=json $img.qcow2
done
same_as_qemu_err info --output=json --backing-chain luks.qcow2
same_as_qemu_err info -f qcow2 --image-opts driver=qcow2,file.filename=luks.qcow2
# creating an overlay opens the encrypted backing file for its size only
for t in q m; do
    rm -f $t-ov.qcow2
    if [ $t = q ]; then tool=$QEMU_IMG; else tool=$QIMG; fi
    "$tool" create -q -f qcow2 -b luks.qcow2 -F qcow2 $t-ov.qcow2 >/dev/null 2>&1
done
assert_eq "create -b on an encrypted backing file" "$("$QEMU_IMG" info q-ov.qcow2 | sed 1d)" \
    "$("$QEMU_IMG" info m-ov.qcow2 | sed 1d)"

# ---- corrupted LUKS headers ----
# bad WHERE FMT VALUE...: a patched copy of cbc.qcow2 (badN.qcow2, all made
# by one python3 below), whose info must be qemu-img's
nbad=0
: >bad.list
bad() {
    nbad=$((nbad + 1))
    echo "bad$nbad.qcow2 $*" >>bad.list
}
bad L0 s XUKS                    # magic
bad L6 H 2                       # version
bad L104 I 100                   # payload offset below the key material
bad L104 I 4                     # payload offset in the header
bad L8 s aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa   # cipher name not NUL terminated
bad L72 s shashashashashashashashashashasha # hash spec not NUL terminated
bad L104 I 0xffffffff            # past the end: qemu-img shows it
bad L108 I 17                    # key bytes: slots overlap
bad L108 I 0
bad L164 I 0                     # master key iterations
bad L208 I 1                     # slot 0 state
bad L212 I 0                     # slot 0 iterations
bad L248 I 7                     # slot 0 key offset inside the header
bad L248 I 100000
bad L252 I 3999                  # slot 0 stripes
bad L212 I 0 L252 I 1            # stripes are checked first
bad L8 s 'foo\0'
bad L8 s 'cast5\0'
bad L8 s 'serpent\0'
bad L8 s 'foo\0' L72 s 'bar\0'
bad L40 s 'cbc\0'
bad L40 s 'cbc-\0'
bad L40 s 'cbc-essiv\0'
bad L40 s 'cbc-plain:sha1\0'
bad L40 s 'zz-essiv:xx\0'
bad L40 s 'zzz-plain64\0'
bad L40 s 'xts-plain64\0'
bad L40 s 'ecb-plain64\0'
bad L72 s 'SHA1\0'
bad L72 s 'ripemd160\0'
bad L168 s 'ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ABCD'
bad E0 Q 262145                  # crypto header offset not cluster aligned
bad E0 Q 0x10000000              # past the end of the file
bad E8 Q 591                     # shorter than a LUKS header
bad E8 Q 592
bad 32 I 1                       # the extension with the AES method
bad 32 I 3
python3 patch.py --list cbc.qcow2 bad.list || _fail "patch: $(cat bad.list)"
for i in $(seq $nbad); do
    same_as_qemu_err info bad$i.qcow2 || sed -n "${i}p" bad.list
done
# qimg is stricter: a slot offset near 2^32 sectors (qemu-img wraps)
cp cbc.qcow2 bad.qcow2
python3 patch.py bad.qcow2 L248 I 0xffffffff
assert_rc "qemu-img info: slot offset 0xffffffff sectors" 0 "$QEMU_IMG" info bad.qcow2
"$QIMG" info bad.qcow2 >m.out 2>&1
assert_eq "qimg info: slot offset 0xffffffff sectors" \
    "1 qimg: Could not open 'bad.qcow2': Keyslot 0 is overlapping with the encrypted payload" \
    "$? $(cat m.out)"
# no crypto header extension: qemu-img info crashes; qimg says why
cp cbc.qcow2 bad.qcow2
python3 patch.py bad.qcow2 E-8 I 0x11111111
"$QIMG" info bad.qcow2 >m.out 2>&1
assert_eq "qimg info: LUKS without its extension" \
    "1 qimg: Could not open 'bad.qcow2': LUKS encryption method without a CRYPTO header extension" \
    "$? $(cat m.out)"

# ---- everything else is refused (no secret), nothing written ----
sum_before=$(md5sum luks.qcow2 aes.qcow2 ov.qcow2)
for img in luks aes; do
    for cmd in "check $img.qcow2" "check -r all $img.qcow2" "map $img.qcow2" \
        "map --output=json $img.qcow2" "convert -O raw $img.qcow2 out.raw" \
        "compare $img.qcow2 $img.qcow2" "snapshot -l $img.qcow2" \
        "snapshot -c s $img.qcow2" "resize $img.qcow2 32M" \
        "amend -o lazy_refcounts=on $img.qcow2" "bitmap --add $img.qcow2 b" \
        "rebase -u -b '' $img.qcow2" "measure -O qcow2 $img.qcow2" \
        "dd if=$img.qcow2 of=out.raw" "bench -c 1 $img.qcow2"; do
        rm -f out.raw
        eval same_as_qemu_err "$cmd"
    done
done
same_as_qemu_err commit ov.qcow2
same_as_qemu_err map ov.qcow2
same_as_qemu_err check ov.qcow2
same_as_qemu_err check --object secret,id=s0,data=123456 luks.qcow2
same_as_qemu_err amend --object secret,id=s0,data=123456 -o encrypt.key-secret=s0 luks.qcow2
assert_eq "encrypted images unchanged" "$sum_before" "$(md5sum luks.qcow2 aes.qcow2 ov.qcow2)"

# ---- --object ----
"$QEMU_IMG" create -q -f qcow2 plain.qcow2 1M
printf 123456 >sec.txt
printf MTIzNDU2 >sec.b64
mkdir dir
for o in secret secret,data=x id=s,data=x foo,id=x foo qom-type=secret,id=s,data=x \
    "secret,id=s,data=x --object secret,id=s,data=y" \
    "secret,id=s,data=x --object secret,id=s" \
    "secret,id=s,data=x --object secret,id=s,foo=y" \
    secret,id=s,data=x,file=sec.txt secret,id=s secret,id=s,file=nosuch secret,id=s,file=dir \
    secret,id=s,file=sec.txt secret,id=s,file=sec.b64,format=base64 \
    'secret,id=s,data=%%%,format=base64' secret,id=s,data=abc,format=base64 \
    secret,id=s,data=x,format=raw secret,id=s,data=x,format=hex \
    secret,id=s,data=x,foo=bar secret,id=1,foo=bar secret,id=1s,data=x secret,id=,data=x \
    secret,id=a.b-c_d,data=x secret,id=s,data=x,id=t secret,id=s,data=x,loaded=on \
    secret,id=s,data=x,keyid=k secret,id=s,data=x,keyid=s secret,id=s,data=x,iv=abc \
    secret,id=s,data= secret,id=s,data=a,,b secret,id=s,data=x,,,y 'secret,id=s,data=x,' \
    secret,id=s,,data=x secret,help help,foo; do
    # shellcheck disable=SC2086
    same_as_qemu_err info --object $o plain.qcow2
done
# types qemu-img has and qimg does not honour are refused by name
run_both info --object authz-simple,id=a,identity=x plain.qcow2
assert_eq "--object authz-simple" \
    "1 qimg: Object type 'authz-simple' is not supported by qimg (only 'secret' is)" \
    "$M_RC $M_ERR"
# the list of types: qimg's is its one type
run_both info --object help plain.qcow2
assert_eq "--object help" "0 List of user creatable objects:
  secret" "$M_RC $M_OUT"
# keyid naming an existing secret: the data is encrypted, qimg does not
# decrypt secrets
run_both info --object secret,id=k,data=x --object secret,id=s,data=x,keyid=k plain.qcow2
assert_eq "--object keyid=existing" \
    "1 qimg: Secret 's' is encrypted with secret 'k' (keyid): qimg does not decrypt secrets; give its data in the clear" \
    "$M_RC $M_ERR"
# an unreferenced secret changes nothing, for every command taking --object
S="--object secret,id=s0,data=123456"
for cmd in "info $S plain.qcow2" "check $S plain.qcow2" "map $S plain.qcow2" \
    "compare $S plain.qcow2 plain.qcow2" "snapshot $S -l plain.qcow2" \
    "measure $S -O qcow2 plain.qcow2" "info $S luks.qcow2" "convert $S -O raw plain.qcow2 o.raw" \
    "resize $S plain.qcow2 2M" "amend $S -o lazy_refcounts=on plain.qcow2" \
    "rebase $S -u -b '' plain.qcow2" \
    "commit $S plain.qcow2"; do
    eval same_as_qemu_err "$cmd"
done
for t in q m; do
    rm -f $t.qcow2
    if [ $t = q ]; then tool=$QEMU_IMG; else tool=$QIMG; fi
    # shellcheck disable=SC2086
    "$tool" create $S -q -f qcow2 $t.qcow2 1M
    # shellcheck disable=SC2086
    "$tool" bitmap $S --add $t.qcow2 b0
done
assert_eq "create, bitmap with an unreferenced secret" \
    "$("$QEMU_IMG" info q.qcow2 | sed -e 1d -e '/^disk size/d')" \
    "$("$QEMU_IMG" info m.qcow2 | sed -e 1d -e '/^disk size/d')"

# ---- encrypt.key-secret references ----
for o in encrypt.format=luks,encrypt.key-secret=s0 encrypt.format=aes,encrypt.key-secret=s0 \
    encrypt.key-secret=s0; do
    rm -f e.qcow2
    same_as_qemu_err create -f qcow2 -o $o e.qcow2 1M
    rm -f e.qcow2
    same_as_qemu_err create --object secret,id=s1,data=x -f qcow2 -o $o e.qcow2 1M
done
rm -f e.qcow2 out.qcow2
same_as_qemu_err convert -O qcow2 -o encrypt.format=luks,encrypt.key-secret=s0 plain.qcow2 out.qcow2
# the old AES method is made as qemu-img 7.2 makes it (qcow2/create.c
# invariant 6): the same bytes (nothing in it is random), QEMU's errors for
# the LUKS options it does not take, and data a convert encrypted reads
# back through qemu-img
for o in encrypt.format=aes encryption=on encryption=on,compat=0.10 \
    encrypt.format=aes,preallocation=metadata; do
    rm -f q-aes.qcow2 m-aes.qcow2
    # shellcheck disable=SC2086
    "$QEMU_IMG" create -q $S -f qcow2 -o $o,encrypt.key-secret=s0 q-aes.qcow2 4M
    # shellcheck disable=SC2086
    assert_rc "create -o $o" 0 "$QIMG" create -q $S -f qcow2 -o $o,encrypt.key-secret=s0 \
        m-aes.qcow2 4M
    assert_rc "create -o $o: the same bytes as qemu-img's" 0 cmp q-aes.qcow2 m-aes.qcow2
done
for o in encrypt.cipher-alg=aes-128 encrypt.iter-time=10 encrypt.hash-alg=sha1; do
    rm -f e.qcow2
    # shellcheck disable=SC2086
    same_as_qemu_err create $S -f qcow2 -o encrypt.format=aes,encrypt.key-secret=s0,$o e.qcow2 1M
done
rm -f e.qcow2
"$QEMU_IMG" create -q -f qcow2 src-aes.qcow2 2M
"$QEMU_IO" -f qcow2 -c "write -P 7 0 192k" -c "write -P 9 1M 4k" src-aes.qcow2 >/dev/null
# shellcheck disable=SC2086
assert_rc "convert into a new aes image" 0 "$QIMG" convert $S -O qcow2 \
    -o encryption=on,encrypt.key-secret=s0 src-aes.qcow2 e.qcow2
# shellcheck disable=SC2086
assert_rc "qemu-img reads what qimg encrypted" 0 "$QEMU_IMG" compare $S --image-opts \
    file.filename=src-aes.qcow2 driver=qcow2,file.filename=e.qcow2,encrypt.key-secret=s0
# shellcheck disable=SC2086
assert_rc "qemu-img check of the aes image" 0 "$QEMU_IMG" check $S -q \
    --image-opts driver=qcow2,file.filename=e.qcow2,encrypt.key-secret=s0

# ---- encrypt.key-secret in the image's name ----
K=encrypt.key-secret=s0
for img in luks aes plain; do
    same_as_qemu_err info --image-opts driver=qcow2,file.filename=$img.qcow2,$K
    same_as_qemu_err info --output=json --image-opts driver=qcow2,file.filename=$img.qcow2,$K
    same_as_qemu_err info "json:{\"driver\":\"qcow2\",\"file\":{\"filename\":\"$img.qcow2\"},\"encrypt\":{\"key-secret\":\"s0\"}}"
done
same_as_qemu_err info --backing-chain --image-opts driver=qcow2,file.filename=ov.qcow2,$K
# a backing layer the caller names keyed by its own encrypt.key-secret
# (QEMU's 158), and without one
BL=driver=qcow2,file.filename=ov.qcow2,backing.driver=qcow2,backing.file.filename=luks.qcow2
# shellcheck disable=SC2086
same_as_qemu_err map $S --image-opts $BL,backing.encrypt.key-secret=s0
# shellcheck disable=SC2086
same_as_qemu_err map $S --image-opts $BL
# shellcheck disable=SC2086
same_as_qemu_err compare $S --image-opts $BL,backing.encrypt.key-secret=s0 \
    driver=qcow2,file.filename=luks.qcow2,$K
same_as_qemu_err check --image-opts driver=qcow2,file.filename=plain.qcow2,$K
for img in luks aes; do
    for cmd in check map; do
        run_both $cmd --image-opts driver=qcow2,file.filename=$img.qcow2,$K
        assert_eq "$cmd of $img with a missing key-secret: as qemu-img" \
            "$Q_RC ${Q_ERR##*: }" "$M_RC ${M_ERR##*: }"
        assert_eq "$cmd of $img with a missing key-secret" "1 No secret with id 's0'" \
            "$M_RC ${M_ERR##*: }"
        # with the key: as qemu-img (120 and 121 test the data paths)
        # shellcheck disable=SC2086
        same_as_qemu_err $cmd $S --image-opts driver=qcow2,file.filename=$img.qcow2,$K
    done
done
assert_eq "encrypted images unchanged at the end" "$sum_before" "$(md5sum luks.qcow2 aes.qcow2 ov.qcow2)"

finish
