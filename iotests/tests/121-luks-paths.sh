#!/bin/bash
# Every data path of an encrypted qcow2 image (qcow2/crypt.c invariant 1),
# each against qemu-img/qemu-io 7.2 on the same input:
#  - compare, map (JSON and human), dd, measure of a LUKS target;
#  - an overlay over an encrypted backing file: its key named as
#    backing.encrypt.key-secret (api/json-name.c invariant 10); rebase (safe)
#    and commit through such chains give the same guest contents as
#    qemu-img's, and qemu-img check stays clean;
#  - internal snapshots: created and applied by each tool, read by the other;
#    the vmstate area is encrypted and reads back (qimg vmstate, through a
#    snapshot view that shares the key: crypt.c invariant 7);
#  - resize with preallocation=full (host zeros, which read back as what
#    they decrypt to, as in qemu-img) and the v2 downgrade of zero clusters
#    (encrypted zeros: amend.c invariant 4);
#  - qimg nbd serving an encrypted image (--object secret and --image-opts,
#    the secret handed over in a memfd, never on nbdkit's command line);
#  - qimg io with -n (cache none: the aio engine's ring takes encrypted
#    reads and rewrites, crypt.c invariant 3) and qimg bench.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3 nbdkit qimg-nbd-plugin

S="--object secret,id=s0,data=hunter2"
IT=encrypt.iter-time=10
opts() { echo "driver=qcow2,file.filename=$1,encrypt.key-secret=s0${2:+,$2}"; }
create() { # create NAME [OPTS]: qimg makes an encrypted image
    rm -f "$1"
    # shellcheck disable=SC2086
    "$QIMG" create -q -f qcow2 $S -o "encrypt.format=luks,encrypt.key-secret=s0,$IT${2:+,$2}" \
        "$1" 4M || _fail "create $1"
}
# qio TOOL NAME OPTS CMD...: qemu-io (q) or qimg io (m) on an image name
qio2() {
    local tool=$1 name=$2 args=() c
    shift 2
    for c in "$@"; do args+=(-c "$c"); done
    if [ "$tool" = q ]; then set -- "$QEMU_IO"; else set -- "$QIMG" io; fi
    # shellcheck disable=SC2086
    "$@" $S --image-opts "$name" "${args[@]}" >.io.out 2>&1
    if [ $? -ne 0 ] || grep -qi 'error\|fail\|pattern' .io.out; then
        _fail "$tool io on $name: ${args[*]}"
        head -5 .io.out
    fi
}
guest() { # guest TOOL NAME OUT: the guest contents as raw
    rm -f "$3"
    # shellcheck disable=SC2086
    "$1" convert $S --image-opts "$2" -O raw "$3" || _fail "$1 convert $2"
}

create base.qcow2
qio2 m "$(opts base.qcow2)" "write -P 0x11 0 1M" "write -P 0x12 2M 100k" "write -z 3M 64k"

# ---- compare, map, dd, measure ----
guest "$QEMU_IMG" "$(opts base.qcow2)" base.raw
for args in "$(opts base.qcow2) driver=raw,file.filename=base.raw" \
    "-s $(opts base.qcow2) driver=raw,file.filename=base.raw"; do
    # shellcheck disable=SC2086
    same_as_qemu_err compare $S --image-opts $args
done
# shellcheck disable=SC2086
same_as_qemu_err map $S --output=json --image-opts "$(opts base.qcow2)"
# shellcheck disable=SC2086
same_as_qemu_err map $S --image-opts "$(opts base.qcow2)"
rm -f dd.raw
# shellcheck disable=SC2086
same_as_qemu_err dd $S --image-opts if="$(opts base.qcow2)" of=dd.raw bs=64k skip=2 count=40
assert_eq "dd of an encrypted image" "$(head -c 2621440 base.raw | tail -c 2490368 | md5sum)" \
    "$(md5sum <dd.raw)"
# (each qemu-img measure of a LUKS target runs its PBKDF2 benchmark: the
# CBC one under QIMG_LONG=1)
mo=("")
[ -n "${QIMG_LONG:-}" ] && mo+=(",encrypt.cipher-alg=aes-128,encrypt.cipher-mode=cbc,cluster_size=4k")
for o in "${mo[@]}"; do
    # shellcheck disable=SC2086
    same_as_qemu_err_kdf measure $S -O qcow2 -o encrypt.format=luks,encrypt.key-secret=s0$o \
        --image-opts "$(opts base.qcow2)"
done
same_as_qemu_err_kdf measure -O qcow2 -o encrypt.format=luks --size 1G

# ---- overlays: the backing file's key ----
"$QEMU_IMG" create -q -f qcow2 -b base.qcow2 -F qcow2 ov.qcow2
qio2 q "driver=qcow2,file.filename=ov.qcow2,backing.encrypt.key-secret=s0" "write -P 0x21 512k 64k"
# shellcheck disable=SC2086
same_as_qemu_err map $S --output=json --image-opts driver=qcow2,file.filename=ov.qcow2
# shellcheck disable=SC2086
same_as_qemu_err convert $S -O raw --image-opts \
    driver=qcow2,file.filename=ov.qcow2,backing.encrypt.key-secret=s0 ov.raw
guest "$QIMG" "driver=qcow2,file.filename=ov.qcow2,backing.encrypt.key-secret=s0" ov-m.raw
guest "$QEMU_IMG" "driver=qcow2,file.filename=ov.qcow2,backing.encrypt.key-secret=s0" ov-q.raw
assert_eq "an overlay over an encrypted backing file" "$(md5sum <ov-q.raw)" \
    "$(md5sum <ov-m.raw)"
# an encrypted overlay over an encrypted backing file, two levels of keys
rm -f ov2.qcow2
# shellcheck disable=SC2086
"$QIMG" create -q -f qcow2 $S -o encrypt.format=luks,encrypt.key-secret=s0,$IT \
    -b ov.qcow2 -F qcow2 ov2.qcow2
K2="backing.backing.encrypt.key-secret=s0"
qio2 m "$(opts ov2.qcow2 "$K2")" "write -P 0x31 1536k 64k" "write -P 0x32 3M 4k"
qio2 q "$(opts ov2.qcow2 "$K2")" "read -P 0x31 1536k 64k" "read -P 0x21 512k 64k" \
    "read -P 0x11 0 512k" "read -P 0x32 3M 4k"
# rebase (safe) onto a plain base, by each tool on a copy
"$QEMU_IMG" create -q -f qcow2 nb.qcow2 4M
"$QEMU_IO" -c "write -P 0x41 0 2M" nb.qcow2 >/dev/null
for t in q m; do
    cp ov2.qcow2 rb-$t.qcow2
    if [ $t = q ]; then tool=$QEMU_IMG; else tool=$QIMG; fi
    # shellcheck disable=SC2086
    "$tool" rebase $S --image-opts "$(opts rb-$t.qcow2 "$K2")" -b "$PWD/nb.qcow2" -F qcow2 ||
        _fail "$t rebase"
    guest "$QEMU_IMG" "$(opts rb-$t.qcow2)" rb-$t.raw
done
guest "$QEMU_IMG" "$(opts ov2.qcow2 "$K2")" ov2.raw
assert_eq "rebase keeps the guest's view" "$(md5sum <ov2.raw)" "$(md5sum <rb-m.raw)"
assert_eq "rebase as qemu-img's" "$(md5sum <rb-q.raw)" "$(md5sum <rb-m.raw)"
# shellcheck disable=SC2086
assert_rc "check after qimg's rebase" 0 "$QEMU_IMG" check $S --image-opts "$(opts rb-m.qcow2)"
# commit the encrypted overlay into its encrypted base (copies)
for t in q m; do
    cp base.qcow2 cb-$t.qcow2
    cp ov2.qcow2 ct-$t.qcow2
    # shellcheck disable=SC2086
    "$QEMU_IMG" rebase -u -b cb-$t.qcow2 -F qcow2 $S --image-opts "$(opts ct-$t.qcow2)"
    if [ $t = q ]; then tool=$QEMU_IMG; else tool=$QIMG; fi
    # shellcheck disable=SC2086
    "$tool" commit -q $S --image-opts "$(opts ct-$t.qcow2 backing.encrypt.key-secret=s0)" ||
        _fail "$t commit"
    guest "$QEMU_IMG" "$(opts cb-$t.qcow2)" cb-$t.raw
done
assert_eq "commit into an encrypted base, as qemu-img's" "$(md5sum <cb-q.raw)" \
    "$(md5sum <cb-m.raw)"
# shellcheck disable=SC2086
assert_rc "check of the base after qimg's commit" 0 "$QEMU_IMG" check $S \
    --image-opts "$(opts cb-m.qcow2)"

# ---- snapshots and the vmstate area ----
cp base.qcow2 sn.qcow2
# shellcheck disable=SC2086
"$QIMG" snapshot $S -c one --image-opts "$(opts sn.qcow2)" || _fail "qimg snapshot -c"
qio2 q "$(opts sn.qcow2)" "write -P 0x51 0 64k"
# shellcheck disable=SC2086
"$QEMU_IMG" snapshot $S -c two --image-opts "$(opts sn.qcow2)" || _fail "qemu-img snapshot -c"
qio2 m "$(opts sn.qcow2)" "write -P 0x52 0 64k"
# shellcheck disable=SC2086
"$QEMU_IMG" snapshot $S -a one --image-opts "$(opts sn.qcow2)" || _fail "qemu-img snapshot -a"
qio2 m "$(opts sn.qcow2)" "read -P 0x11 0 64k"
# shellcheck disable=SC2086
"$QIMG" snapshot $S -a two --image-opts "$(opts sn.qcow2)" || _fail "qimg snapshot -a"
qio2 q "$(opts sn.qcow2)" "read -P 0x51 0 64k"
# shellcheck disable=SC2086
same_as_qemu_err convert $S -l one -O raw --image-opts "$(opts sn.qcow2)" one.raw
head -c 700000 /dev/urandom >vm.bin
# shellcheck disable=SC2086
"$QIMG" vmstate save -q $S --image-opts "$(opts sn.qcow2)" vm vm.bin || _fail "vmstate save"
# shellcheck disable=SC2086
"$QIMG" vmstate load -q $S --image-opts "$(opts sn.qcow2)" vm vm.out || _fail "vmstate load"
assert_eq "the vmstate reads back" "$(md5sum <vm.bin)" "$(md5sum <vm.out)"
assert_eq "the vmstate is not in the file in the clear" 0 \
    "$(python3 -c 'import sys; d = open("sn.qcow2", "rb").read(); v = open("vm.bin", "rb").read(); print(sum(d.find(v[i:i + 64]) >= 0 for i in range(0, len(v), 65536)))')"
# shellcheck disable=SC2086
assert_rc "check after the snapshots" 0 "$QEMU_IMG" check $S --image-opts "$(opts sn.qcow2)"
# shellcheck disable=SC2086
same_as_qemu_err snapshot $S -l --image-opts "$(opts sn.qcow2)"

# ---- resize with preallocation, the v2 downgrade ----
for t in q m; do
    cp base.qcow2 rs-$t.qcow2
    if [ $t = q ]; then tool=$QEMU_IMG; else tool=$QIMG; fi
    # shellcheck disable=SC2086
    "$tool" resize -q $S --preallocation=full --image-opts "$(opts rs-$t.qcow2)" 6M ||
        _fail "$t resize"
    guest "$QEMU_IMG" "$(opts rs-$t.qcow2)" rs-$t.raw
done
assert_eq "resize --preallocation=full: what the guest sees, as qemu-img's" \
    "$(md5sum <rs-q.raw)" "$(md5sum <rs-m.raw)"
cp base.qcow2 v2.qcow2
qio2 m "$(opts v2.qcow2)" "write -z 64k 64k" "write -z 1M 64k"
guest "$QEMU_IMG" "$(opts v2.qcow2)" v2-before.raw
# shellcheck disable=SC2086
"$QIMG" amend $S -o compat=0.10 --image-opts "$(opts v2.qcow2)" || _fail "amend compat=0.10"
guest "$QEMU_IMG" "$(opts v2.qcow2)" v2-after.raw
assert_eq "downgrade: zero clusters read as zeros still" "$(md5sum <v2-before.raw)" \
    "$(md5sum <v2-after.raw)"
# shellcheck disable=SC2086
assert_rc "check after the downgrade" 0 "$QEMU_IMG" check $S --image-opts "$(opts v2.qcow2)"

# ---- qimg nbd ----
cp base.qcow2 nbd.qcow2
rm -f nbd.sock
# shellcheck disable=SC2086
"$QIMG" nbd $S --image-opts "$(opts nbd.qcow2)" -k "$PWD/nbd.sock" -t --fork \
    --pid-file "$PWD/nbd.pid" || _fail "qimg nbd"
assert_eq "the secret is not on nbdkit's command line" "" \
    "$(tr '\0' ' ' </proc/"$(cat nbd.pid)"/cmdline | grep -o hunter2)"
"$QEMU_IO" -f raw "nbd+unix:///?socket=$PWD/nbd.sock" -c "read -P 0x11 0 1M" \
    -c "write -P 0x61 1M 64k" >.io.out 2>&1
assert_eq "qemu-io over qimg nbd" 0 "$(grep -ci 'fail\|error' .io.out)"
rm -f nbd.raw
"$QEMU_IMG" convert -f raw -O raw "nbd+unix:///?socket=$PWD/nbd.sock" nbd.raw
kill "$(cat nbd.pid)"
for _ in $(seq 100); do kill -0 "$(cat nbd.pid)" 2>/dev/null || break; sleep 0.1; done
guest "$QEMU_IMG" "$(opts nbd.qcow2)" nbd-after.raw
assert_eq "qimg nbd: read and written" "$(md5sum <nbd.raw)" "$(md5sum <nbd-after.raw)"
qio2 q "$(opts nbd.qcow2)" "read -P 0x61 1M 64k"

# ---- qimg io -n (cache none, aio), qimg bench ----
cp base.qcow2 io.qcow2
qio2 m "$(opts io.qcow2)" "aio_write -P 0x71 0 4k" "aio_write -P 0x72 64k 64k" "aio_flush" \
    "aio_read -P 0x71 0 4k" "aio_flush"
# the first write switches fast writes on, the first read loads the L2
# table; the second of each goes to the ring
"$QIMG" io -n $S --image-opts "$(opts io.qcow2)" -c "aio_write -P 0x73 8k 4k" \
    -c "aio_read -P 0x72 64k 4k" -c "aio_flush" -c "aio_write -P 0x74 12k 4k" \
    -c "aio_read -P 0x72 68k 4k" -c "aio_read -P 0x71 0 4k" -c "aio_flush" \
    -c "read -P 0x73 8k 4k" -c "read -P 0x74 12k 4k" >.io.out 2>&1
assert_eq "qimg io -n" 0 "$(grep -ci 'fail\|error' .io.out)"
qio2 q "$(opts io.qcow2)" "read -P 0x71 0 4k" "read -P 0x73 8k 4k" "read -P 0x74 12k 4k" \
    "read -P 0x72 64k 64k"
# shellcheck disable=SC2086
assert_rc "qimg bench -w -t none" 0 "$QIMG" bench $S -q -w -c 3000 -d 32 -t none \
    --image-opts "$(opts io.qcow2)"
# shellcheck disable=SC2086
assert_rc "check after bench" 0 "$QEMU_IMG" check $S --image-opts "$(opts io.qcow2)"

finish
