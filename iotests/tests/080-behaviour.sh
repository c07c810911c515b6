#!/bin/bash
# Behaviours a script can see, each against qemu-img/qemu-io on the same
# input (issue 15 items 4 and 5):
#  - the first corruption event prints QEMU's "qcow2: Marking image as
#    corrupt: ...; further corruption events will be suppressed" line
#    (meta.c invariant 3), and a read-only image's "qcow2: Image is
#    corrupt: ...; further non-fatal corruption events will be suppressed";
#  - resize --shrink gives the space back: the file ends where qemu-img's
#    does, for every preallocation mode (resize.c invariant 6);
#  - unknown incompatible features are named from the image's feature-name
#    table ("Unsupported qcow2 feature(s): NAME, Unknown ...: MASK");
#  - encryption: create -o encrypt.*/encryption gives qemu-img's messages
#    (and "Formatting" line) without a secret; images with LUKS or AES
#    encryption are refused as qemu-img refuses them without a secret;
#  - resize past the L1 limit: qemu-img's "Failed to grow the L1 table";
#  - a "file:" prefix: the file protocol, for a name given and a backing
#    file name (taken as it is: relative to the working directory), with
#    QEMU's names and messages;
#  - convert -p prints qemu-img's sequence of "(NN.NN/100%)" lines (the
#    share of the data started, its print rule, the last 100) for raw and
#    qcow2 sources, -S 0, -c, other cluster sizes, -m 1.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3


# ---- corruption lines ----
"$QEMU_IMG" create -q -f qcow2 c.qcow2 1M
"$QEMU_IO" -c 'write -P 1 0 64k' c.qcow2 >/dev/null
python3 - c.qcow2 <<'PY' # cluster 0's L2 entry -> the refcount table
import struct, sys
with open(sys.argv[1], "r+b") as f:
    d = f.read(1 << 20)
    l1 = struct.unpack(">Q", d[40:48])[0]
    l2 = struct.unpack(">Q", d[l1:l1 + 8])[0] & 0x00fffffffffffe00
    f.seek(l2)
    f.write(struct.pack(">Q", (1 << 63) | struct.unpack(">Q", d[48:56])[0]))
PY
cp c.qcow2 q.qcow2
cp c.qcow2 m.qcow2
"$QEMU_IO" -c 'write -P 2 0 4k' q.qcow2 >q.out 2>q.err
"$QIMG" io -c 'write -P 2 0 4k' m.qcow2 >m.out 2>m.err
assert_eq "overlap: the write fails as qemu-io's" "$(cat q.out)" "$(cat m.out)"
assert_eq "overlap: QEMU's marking line" "$(grep '^qcow2:' q.err)" "$(grep '^qcow2:' m.err)"
assert_eq "overlap: the bit" "$("$QEMU_IMG" info q.qcow2 | grep corrupt)" \
    "$("$QEMU_IMG" info m.qcow2 | grep corrupt)"

# ---- resize --shrink gives the space back ----
for p in off metadata falloc full; do
    for t in q m; do
        rm -f $t.qcow2
        "$QEMU_IMG" create -q -f qcow2 -o preallocation=$p $t.qcow2 64M
        "$QEMU_IO" -c 'write -P 3 40M 1M' $t.qcow2 >/dev/null
    done
    "$QEMU_IMG" resize -q --shrink q.qcow2 32M
    "$QIMG" resize -q --shrink m.qcow2 32M
    assert_eq "shrink, preallocation=$p: file size" "$(stat -c %s q.qcow2)" \
        "$(stat -c %s m.qcow2)"
    assert_rc "shrink, preallocation=$p: check" 0 "$QEMU_IMG" check -q m.qcow2
    assert_rc "shrink, preallocation=$p: contents" 0 "$QEMU_IMG" compare -q q.qcow2 m.qcow2
done

# ---- unknown incompatible features, named from the feature-name table ----
"$QEMU_IMG" create -q -f qcow2 f.qcow2 1M
python3 - f.qcow2 <<'PY' # rename the "extended L2" entry to bit 5, set 5 and 9
import struct, sys
with open(sys.argv[1], "r+b") as f:
    d = bytearray(f.read(65536))
    i = d.find(b"extended L2 entries")
    d[i - 1] = 5
    d[i:i + 46] = b"future feature".ljust(46, b"\0")
    v = struct.unpack(">Q", d[72:80])[0]
    d[72:80] = struct.pack(">Q", v | (1 << 5) | (1 << 9))
    f.seek(0)
    f.write(d)
PY
same_as_qemu_err info f.qcow2
same_as_qemu_err check f.qcow2

# ---- encryption ----
for o in encryption=off encrypt.cipher-alg=aes-128 encrypt.format=foo \
    encrypt.format=luks,encrypt.iter-time=10 encryption=on,encrypt.format=luks \
    encrypt.format=luks,compat=0.10 encrypt.key-secret=x encryption=on,compat=0.10 \
    encrypt.format=luks,cluster_size=3 encrypt.cipher-alg=x,cluster_size=3 \
    encrypt.format=luks,compat=0.9 encrypt.format=luks,encrypt.key-secret=s0; do
    rm -f e.qcow2
    same_as_qemu_err create -f qcow2 -o "$o" e.qcow2 1M
    rm -f e.qcow2
done
same_as_qemu_err create -f qcow2 -o help
for fmt in luks aes; do
    rm -f $fmt.qcow2
    "$QEMU_IMG" create -q --object secret,id=s0,data=abc -f qcow2 \
        -o encrypt.format=$fmt,encrypt.key-secret=s0,encrypt.iter-time=10 $fmt.qcow2 1M
    same_as_qemu_err check $fmt.qcow2
    same_as_qemu_err map $fmt.qcow2
    same_as_qemu_err convert -O raw $fmt.qcow2 out.raw
done

# ---- convert -p: qemu-img's sequence ----
truncate -s 64M p.raw
dd if=/dev/urandom of=p.raw bs=1M count=8 seek=20 conv=notrunc status=none
dd if=/dev/urandom of=p.raw bs=64k count=3 seek=700 conv=notrunc status=none
"$QEMU_IMG" convert -O qcow2 p.raw p.qcow2
truncate -s 256M big.raw
dd if=/dev/urandom of=big.raw bs=1M count=90 seek=30 conv=notrunc status=none
for t in "-O qcow2 p.raw" "-O raw p.raw" "-O qcow2 -S 0 p.raw" "-c -O qcow2 p.raw" \
    "-O qcow2 p.qcow2" "-O raw big.raw" "-O qcow2 -o cluster_size=4k big.raw" \
    "-O qcow2 -m 1 big.raw"; do
    rm -f o.img
    # shellcheck disable=SC2086
    q=$("$QEMU_IMG" convert -p $t o.img | tr '\r' '\n')
    rm -f o.img
    # shellcheck disable=SC2086
    m=$("$QIMG" convert -p $t o.img | tr '\r' '\n')
    assert_eq "convert -p $t: the progress lines" "$q" "$m"
done

# ---- file: ----
mkdir -p sub
"$QEMU_IMG" create -q -f qcow2 sub/base.qcow2 1M
"$QEMU_IMG" create -q -f qcow2 -b file:base.qcow2 -F qcow2 sub/top.qcow2
(cd sub && same_as_qemu_err info file:top.qcow2)
(cd sub && same_as_qemu_err info --backing-chain top.qcow2)
(cd sub && same_as_qemu_err info file:nosuch.qcow2)
same_as_qemu_err info --backing-chain sub/top.qcow2
same_as_qemu_err compare file:sub/base.qcow2 sub/base.qcow2
for d in . sub; do
    t=top.qcow2
    [ $d = . ] && t=sub/top.qcow2
    (cd $d && "$QEMU_IO" -c 'read 0 1k' $t >"$SCRATCH/q.out" 2>&1)
    (cd $d && "$QIMG" io -c 'read 0 1k' $t >"$SCRATCH/m.out" 2>&1)
    sed -i -e 's/^qemu-io: /qimg: /' -e '/ops; /d' q.out
    sed -i '/ops; /d' m.out
    assert_eq "file: backing name, io from $d" "$(cat q.out)" "$(cat m.out)"
done

# ---- resize past the L1 table's limit ----
"$QEMU_IMG" create -q -f qcow2 r.qcow2 1M
same_as_qemu_err resize r.qcow2 100P
finish
