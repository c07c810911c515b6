#!/bin/bash
# Writing VMDK (vmdk/create.c, vmdk/write.c) against qemu-img 7.2:
# create in every subformat gives qemu-img's files (the extents byte for
# byte, the descriptor but for its random CID) with every option; bad
# options get qemu-img's messages; convert -O vmdk in every subformat reads
# back identically with qemu-img, checks clean and opens in libvmdk
# (vmdkinfo); streamOptimized holds qemu-img's compressed grains; guest
# writes into a delta disk with and without zeroed grains give qemu-io's
# bytes, map and grain layout; streamOptimized refuses what QEMU refuses.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io vmdkinfo

SUBS="monolithicSparse monolithicFlat twoGbMaxExtentSparse twoGbMaxExtentFlat streamOptimized"
nocid() { sed -e 's/^CID=[0-9a-f]*$/CID=x/' -e 's/^parentCID=[0-9a-f]*$/parentCID=p/' "$@"; }
# the descriptor of a VMDK: the file (split/flat) or its embedded area
desc() { if [ "$(head -c 4 "$1")" = KDMV ]; then
    dd if="$1" bs=512 skip=1 count=20 status=none | tr -d '\0'
else cat "$1"; fi | nocid; }
# every file of dir $1 but the descriptor's own: equal to dir $2's
same_extents() {
    local f
    for f in "$1"/*; do
        case $f in
        */d.vmdk) continue ;;
        *-flat.vmdk | *-f0*.vmdk) # holes: the size says it all
            assert_eq "$3: extent ${f##*/}" "$(stat -c %s "$f")" "$(stat -c %s "$2/${f##*/}")" ;;
        *) assert_rc "$3: extent ${f##*/}" 0 cmp "$f" "$2/${f##*/}" ;;
        esac
    done
}

# ---- create: every subformat and option, qemu-img's files ----
opts_list=("" "adapter_type=lsilogic,hwversion=7,toolsversion=10240"
    "compat6=on,adapter_type=buslogic" "zeroed_grain=on" "adapter_type=legacyESX")
for sub in $SUBS; do
    for o in "${opts_list[@]}"; do
        case $sub/$o in *Flat/zeroed*) continue ;; esac
        rm -rf q m && mkdir q m
        "$QEMU_IMG" create -q -f vmdk -o "subformat=$sub${o:+,$o}" q/d.vmdk 2200M
        "$QIMG" create -q -f vmdk -o "subformat=$sub${o:+,$o}" m/d.vmdk 2200M
        assert_eq "$sub $o: file names" "$(ls q)" "$(ls m)"
        assert_eq "$sub $o: descriptor" "$(desc q/d.vmdk)" "$(desc m/d.vmdk)"
        if [ "$(head -c 4 q/d.vmdk)" = KDMV ]; then # header and tables
            assert_rc "$sub $o: sparse header" 0 cmp -n 512 q/d.vmdk m/d.vmdk
            assert_rc "$sub $o: tables" 0 cmp -i 10752 q/d.vmdk m/d.vmdk
        fi
        same_extents q m "$sub $o"
    done
done
# a delta disk: parentCID is the parent's, the hint as given
"$QEMU_IMG" create -q -f vmdk base.vmdk 1M
"$QEMU_IO" -c 'write -P 0x11 0 1M' base.vmdk >/dev/null
mkdir dq dm
cp base.vmdk dq/ && cp base.vmdk dm/
"$QEMU_IMG" create -q -f vmdk -b base.vmdk -F vmdk dq/d.vmdk
"$QIMG" create -q -f vmdk -b base.vmdk -F vmdk dm/d.vmdk
assert_eq "delta: descriptor" "$(desc dq/d.vmdk)" "$(desc dm/d.vmdk)"
cid() { dd if="$1" bs=512 skip=1 count=20 status=none | tr -d '\0' | sed -n "s/^$2=//p"; }
assert_eq "delta: parentCID" "$(cid base.vmdk CID)" "$(cid dm/d.vmdk parentCID)"
# qemu-img's messages for what it refuses (and no file left behind)
for o in adapter_type=scsi subformat=vmfs compat6=on,hwversion=7 compat6=maybe \
    subformat=monolithicFlat,zeroed_grain=on preallocation=metadata nosuch=1; do
    same_as_qemu_err create -f vmdk -o "$o" e.vmdk 1M
    rm -f e.vmdk
    "$QIMG" create -q -f vmdk -o "$o" e.vmdk 1M 2>/dev/null
    _checks=$((_checks + 1))
    [ ! -e e.vmdk ] || _fail "create -o $o left e.vmdk"
done
same_as_qemu_err create -f vmdk -o subformat=monolithicFlat -b base.vmdk -F vmdk e.vmdk
"$QEMU_IMG" create -q -f raw base.raw 1M
same_as_qemu_err create -f vmdk -b base.raw -F raw e.vmdk 1M

# ---- convert -O vmdk: every subformat ----
{ head -c 1M /dev/urandom; head -c 192k /dev/zero; head -c 320k /dev/urandom; } >src.raw
truncate -s 5M src.raw
printf 'tail' | dd of=src.raw bs=1 seek=4200000 conv=notrunc status=none
for sub in $SUBS; do
    rm -rf c && mkdir c
    assert_rc "convert -O vmdk $sub" 0 "$QIMG" convert -O vmdk -o subformat=$sub src.raw c/d.vmdk
    "$QEMU_IMG" convert -O raw c/d.vmdk back.raw
    assert_rc "$sub: qemu-img reads the bytes" 0 cmp src.raw back.raw
    assert_rc "$sub: qemu-img check" 0 "$QEMU_IMG" check c/d.vmdk
    vmdkinfo c/d.vmdk >vi.out 2>&1
    assert_eq "$sub: vmdkinfo reads it" "0 5.0 MiB (5242880 bytes)" \
        "$? $(sed -n 's/^\tMedia size:\t*//p' vi.out)"
done
# streamOptimized: qemu-img's grains and tables, byte for byte (the file
# but for the CID and qemu-img's zero padding after the last grain)
"$QEMU_IMG" convert -O vmdk -o subformat=streamOptimized src.raw q.vmdk
"$QIMG" convert -O vmdk -o subformat=streamOptimized src.raw m.vmdk
n=$(stat -c %s m.vmdk)
assert_rc "streamOptimized: grains as qemu-img's" 0 cmp -i 10752 -n $((n - 10752)) q.vmdk m.vmdk
assert_rc "streamOptimized: only zeros after" 0 cmp -i "$n:0" -n $(($(stat -c %s q.vmdk) - n)) \
    q.vmdk /dev/zero
# ... on every core (write.c invariant 6: grains deflated in parallel,
# appended in guest order by whichever thread has the turn): 256 grains of
# every compressibility, with 16 requests in flight, still qemu-img's bytes
python3 - <<'PY'
import random
rng = random.Random(92)
with open('mix.raw', 'wb') as f:
    for i in range(256):
        k = rng.randrange(5)
        if k == 0:
            g = rng.randbytes(65536)
        elif k == 1:
            n = rng.randrange(1, 65536)
            g = rng.randbytes(n) + bytes(65536 - n)
        elif k == 2:
            g = (b'grain %d ' % i) * (65536 // 10)
            g = g + bytes(65536 - len(g))
        elif k == 3:
            g = bytes([rng.randrange(4) for _ in range(65536)])
        else:
            g = bytes(65536)
        f.write(g)
PY
"$QEMU_IMG" convert -O vmdk -o subformat=streamOptimized mix.raw q.vmdk
"$QIMG" convert -m 16 -O vmdk -o subformat=streamOptimized mix.raw m.vmdk
n=$(stat -c %s m.vmdk)
assert_rc "streamOptimized, 16 in flight: grains as qemu-img's" 0 \
    cmp -i 10752 -n $((n - 10752)) q.vmdk m.vmdk
assert_rc "streamOptimized, 16 in flight: compare" 0 "$QEMU_IMG" compare mix.raw m.vmdk
# a failed append (the 3rd write of grains: at most 64 a write) fails the
# convert, whichever thread made it
rm -f f.vmdk
"$QEMU_IMG" create -q -f vmdk -o subformat=streamOptimized f.vmdk 16M
"$QIMG" convert -n -O vmdk mix.raw "blkdebug:event=compressed_write,errno=28,nth=3,once:f.vmdk" \
    2>err.out
assert_eq "streamOptimized: a failed append fails the convert" 1 "$?"
assert_rc "streamOptimized: the message names the grain" 0 \
    grep -q "Could not write the grain at offset [0-9]*: Injected error" err.out
assert_rc "convert -c -O vmdk" 0 "$QIMG" convert -c -O vmdk src.raw c.vmdk
assert_rc "convert -c: compare" 0 "$QEMU_IMG" compare src.raw c.vmdk

# ---- guest writes into a delta disk (copy-on-write from the parent) ----
writes=(-c 'write -P 0x22 1000 3000' -c 'write -P 0x33 65536 65536' -c 'write -z 131072 65536'
    -c 'write -z 200000 1000' -c 'write -P 0x44 700k 70000' -c 'write -P 0x55 1000 10'
    -c 'discard 0 64k' -c 'flush')
for zg in off on; do
    "$QEMU_IMG" create -q -f vmdk -o zeroed_grain=$zg -b base.vmdk -F vmdk dq/$zg.vmdk
    "$QIMG" create -q -f vmdk -o zeroed_grain=$zg -b base.vmdk -F vmdk dm/$zg.vmdk
    "$QEMU_IO" "${writes[@]}" dq/$zg.vmdk >/dev/null
    cid0=$(cid dm/$zg.vmdk CID)
    assert_rc "zeroed_grain=$zg: qimg io writes" 0 "$QIMG" io "${writes[@]}" dm/$zg.vmdk
    "$QEMU_IMG" convert -O raw dq/$zg.vmdk q.raw
    "$QEMU_IMG" convert -O raw dm/$zg.vmdk m.raw
    assert_rc "zeroed_grain=$zg: the bytes" 0 cmp q.raw m.raw
    assert_eq "zeroed_grain=$zg: map" "$("$QEMU_IMG" map --output=json dq/$zg.vmdk)" \
        "$("$QEMU_IMG" map --output=json dm/$zg.vmdk)"
    assert_rc "zeroed_grain=$zg: grains where qemu-io puts them" 0 \
        cmp -i 10752 dq/$zg.vmdk dm/$zg.vmdk
    assert_rc "zeroed_grain=$zg: qemu-img check" 0 "$QEMU_IMG" check dm/$zg.vmdk
    # the first write of an open renews the CID (QEMU), the rest stays
    _checks=$((_checks + 1))
    [ "$(cid dm/$zg.vmdk CID)" != "$cid0" ] || _fail "zeroed_grain=$zg: CID not renewed"
    assert_eq "zeroed_grain=$zg: descriptor" "$(desc dq/$zg.vmdk)" "$(desc dm/$zg.vmdk)"
done
# ---- streamOptimized: whole grains, once (QEMU's refusals) ----
"$QIMG" create -q -f vmdk -o subformat=streamOptimized s.vmdk 1M
assert_rc "stream: part of a grain" 1 "$QIMG" io -c 'write 0 1000' s.vmdk
grep -q 'Invalid argument' "$SCRATCH/.out" || _fail "stream: $(cat "$SCRATCH/.out")"
assert_rc "stream: a whole grain" 0 "$QIMG" io -c 'write -P 9 64k 64k' s.vmdk
assert_rc "stream: the grain again" 1 "$QIMG" io -c 'write 64k 64k' s.vmdk
grep -q 'Input/output error' "$SCRATCH/.out" || _fail "stream: $(cat "$SCRATCH/.out")"
assert_rc "stream: read back by qemu-io" 0 "$QEMU_IO" -c 'read -P 9 64k 64k' \
    -c 'read -P 0 0 64k' s.vmdk

finish
