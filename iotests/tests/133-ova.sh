#!/bin/bash
# OVA archives as image sources (block/ova.c, api/ova.c; issue 32 item 4):
# archives built with GNU tar (ustar, pax with a long member name, gnu)
# from VMDKs qemu-img made and an OVF written here.  Each disk read
# straight out of the tar ("ova:DISK:FILE") converts byte-identical to
# qemu-img's conversion of the VMDK, and to qemu-img reading it through
# nbdkit's tar filter (a second, independent tar reader); map, compare,
# measure, dd and qimg nbd agree with qemu-img on the VMDK; info lists the
# disks without opening them; broken archives and hostile extent names are
# refused with the problem named, the host file never opened.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io tar nbdkit python3

WATCH=("python3" "$IOTESTS_DIR/watch-open.py")
"$QEMU_IMG" create -q -f raw src.raw 8M
"$QEMU_IO" -f raw -c 'write -P 0x11 0 1M' -c 'write -P 0x22 3M 64k' \
    -c 'write -P 0x33 7M 512k' src.raw >/dev/null
"$QEMU_IMG" convert -f raw -O vmdk -o subformat=streamOptimized src.raw so.vmdk
"$QEMU_IMG" convert -f raw -O vmdk -o subformat=monolithicSparse src.raw sp.vmdk
"$QEMU_IMG" convert -f raw -O vmdk -o subformat=monolithicFlat src.raw flat.vmdk
"$QEMU_IMG" convert -O raw so.vmdk so.raw
"$QEMU_IMG" convert -O raw sp.vmdk sp.raw
LONG=sparse-disk-with-a-member-name-longer-than-the-hundred-bytes-of-a-ustar-name-field-0123456789.vmdk
cp sp.vmdk "$LONG"

# ovf OUT [FILE-ATTRS] HREF:ID:DISKID...: an OVF with one File and one
# Disk per argument (capacity 8 MiB written in MiB units).
ovf() {
    local out=$1 extra=$2 a href id disk
    shift 2
    {
        echo '<?xml version="1.0" encoding="UTF-8"?>'
        echo '<Envelope xmlns="http://schemas.dmtf.org/ovf/envelope/1"' \
            'xmlns:ovf="http://schemas.dmtf.org/ovf/envelope/1">'
        echo '  <References>'
        for a in "$@"; do
            IFS=: read -r href id disk <<<"$a"
            echo "    <File ovf:href=\"$href\" ovf:id=\"$id\" $extra/>"
        done
        echo '  </References>'
        echo '  <DiskSection><Info>Virtual disks</Info>'
        for a in "$@"; do
            IFS=: read -r href id disk <<<"$a"
            echo "    <Disk ovf:diskId=\"$disk\" ovf:fileRef=\"$id\" ovf:capacity=\"8\"" \
                "ovf:capacityAllocationUnits=\"byte * 2^20\"" \
                "ovf:format=\"http://www.vmware.com/interfaces/specifications/vmdk.html#streamOptimized\"/>"
        done
        echo '  </DiskSection>'
        echo '</Envelope>'
    } >"$out"
}
ovf vm.ovf "" so.vmdk:f1:vmdisk1 sp.vmdk:f2:vmdisk2
ovf long.ovf "" so.vmdk:f1:vmdisk1 "$LONG:f2:vmdisk2"
tar --format=ustar -cf ustar.ova vm.ovf so.vmdk sp.vmdk
tar --format=pax -cf pax.ova long.ovf so.vmdk "$LONG"
tar --format=gnu -cf gnu.ova long.ovf so.vmdk "$LONG"

# ---- every disk, byte-identical to qemu-img's conversion ----
for ova in ustar pax gnu; do
    for sel in 0 id=vmdisk1 file=so.vmdk; do
        rm -f out.raw
        assert_rc "$ova: convert ova:$sel" 0 "$QIMG" convert -O raw "ova:$sel:$ova.ova" out.raw &&
            assert_rc "$ova: ova:$sel is so.vmdk's disk" 0 cmp out.raw so.raw
    done
    rm -f out.raw
    assert_rc "$ova: convert ova:1" 0 "$QIMG" convert -O raw "ova:1:$ova.ova" out.raw &&
        assert_rc "$ova: ova:1 is sp.vmdk's disk" 0 cmp out.raw sp.raw
done
assert_rc "a long member name by file=" 0 "$QIMG" convert -O qcow2 "ova:file=$LONG:pax.ova" \
    out.qcow2
assert_rc "... reads as the VMDK" 0 "$QEMU_IMG" compare out.qcow2 sp.vmdk

# the same bytes through nbdkit's tar filter (a tar reader of its own)
for m in so.vmdk sp.vmdk; do
    rm -f nbd.raw
    assert_rc "nbdkit tar filter: $m" 0 nbdkit -U - --filter=tar file ustar.ova \
        tar-entry="$m" --run "'$QEMU_IMG' convert -f vmdk -O raw \"\$uri\" nbd.raw"
    "$QIMG" convert -O raw "ova:file=$m:ustar.ova" out.raw
    assert_rc "qimg and nbdkit+qemu-img agree: $m" 0 cmp out.raw nbd.raw
done

# map, compare, measure, dd, info of a disk: as qemu-img on the VMDK
assert_eq "map --output=json of the sparse disk" \
    "$("$QEMU_IMG" map --output=json sp.vmdk)" "$("$QIMG" map --output=json ova:1:ustar.ova)"
assert_eq "map --output=json of the stream disk" \
    "$("$QEMU_IMG" map --output=json so.vmdk)" "$("$QIMG" map --output=json ova:0:pax.ova)"
assert_rc "compare with the VMDK" 0 "$QIMG" compare ova:0:ustar.ova so.vmdk
assert_rc "compare two disks" 1 "$QIMG" compare ova:0:ustar.ova ova:1:gnu.ova -f raw -F raw
assert_eq "measure" "$("$QEMU_IMG" measure -O qcow2 sp.vmdk)" \
    "$("$QIMG" measure -O qcow2 ova:1:ustar.ova)"
rm -f dd.raw
assert_rc "dd" 0 "$QIMG" dd if=ova:1:ustar.ova of=dd.raw bs=1M -O raw
assert_rc "dd's bytes" 0 cmp dd.raw sp.raw
assert_eq "info of a disk: its VMDK's create type" "streamOptimized" \
    "$("$QIMG" info --output=json ova:0:ustar.ova |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["format-specific"]["data"]["create-type"])')"

# qimg nbd serves a disk out of the archive (read-only); one client (no
# -t): used once it listens, and it leaves with its client
"$QIMG" nbd -r -k "$PWD/n.sock" --pid-file "$PWD/n.pid" ova:id=vmdisk2:ustar.ova 2>n.err &
srv=$!
trap 'kill $srv 2>/dev/null; _cleanup' EXIT
nbd_listening n.sock n.pid $srv || finish
rm -f nbd.raw
assert_rc "qimg nbd: qemu-img reads the disk" 0 timeout 60 "$QEMU_IMG" convert -f raw \
    -O raw "nbd+unix:///?socket=$PWD/n.sock" nbd.raw
server_left $srv "qimg nbd: the server that leaves with its client"
assert_rc "qimg nbd: the bytes" 0 cmp nbd.raw sp.raw

# ---- info lists the disks from the OVF, opening none ----
json_disks() { python3 -c 'import json, sys
i = json.load(sys.stdin)
d = i["format-specific"]["data"]
print(i["format"], i["virtual-size"], d["descriptor"])
for x in d["disks"]:
    print(x["index"], x["id"], x["open-as"], x["file"], x["offset"], x["size"],
          x["capacity"], x["ovf-format"].split("#")[1], x["compression"])'; }
out=$("${WATCH[@]}" so.vmdk sp.vmdk -- "$QIMG" info --output=json pax.ova)
assert_eq "info reads no disk file" "so.vmdk 0
sp.vmdk 0" "$out"
"$QIMG" info --output=json pax.ova | json_disks >disks.txt
read -r _ _ _ _ off1 size1 _ <<<"$(sed -n 2p disks.txt)"
read -r _ _ _ _ off2 size2 _ <<<"$(sed -n 3p disks.txt)"
assert_eq "info --output=json: the disks" "ova 0 long.ovf
0 vmdisk1 ova:0:pax.ova so.vmdk $off1 $(stat -c %s so.vmdk) 8388608 streamOptimized none
1 vmdisk2 ova:1:pax.ova $LONG $off2 $(stat -c %s sp.vmdk) 8388608 streamOptimized none" \
    "$(cat disks.txt)"
assert_rc "offset and size locate so.vmdk's bytes" 0 \
    cmp <(tail -c +$((off1 + 1)) pax.ova | head -c "$size1") so.vmdk
assert_rc "... and the long-named member's" 0 \
    cmp <(tail -c +$((off2 + 1)) pax.ova | head -c "$size2") sp.vmdk
"$QIMG" info ustar.ova >info.txt
assert_rc "human info: format ova" 0 grep -qx 'file format: ova' info.txt
assert_rc "human info: the selector of disk 1" 0 grep -qx '            open as: ova:1:ustar.ova' info.txt
# -f raw keeps the bytes: qemu-img's reading of an OVA
assert_eq "-f raw info" "$("$QEMU_IMG" info -f raw ustar.ova)" "$("$QIMG" info -f raw ustar.ova)"

# ---- without a selector: one disk converts, several are refused ----
ovf one.ovf "" so.vmdk:f1:vmdisk1
tar --format=ustar -cf one.ova one.ovf so.vmdk
rm -f out.raw
assert_rc "a one-disk OVA converts its disk" 0 "$QIMG" convert -O raw one.ova out.raw &&
    assert_rc "... byte-identical" 0 cmp out.raw so.raw
assert_eq "its info: the disk's capacity" 8388608 \
    "$("$QIMG" info --output=json one.ova | python3 -c 'import json,sys; print(json.load(sys.stdin)["virtual-size"])')"
assert_rc "several disks: refused" 1 "$QIMG" convert -O raw ustar.ova out.raw
cp "$SCRATCH/.out" refused.txt
assert_rc "... naming the disks and the syntax" 0 grep -qF \
    "'ustar.ova' is an OVA archive holding 2 disks (0: vmdisk1 (so.vmdk), 1: vmdisk2 (sp.vmdk)): name one as ova:N:ustar.ova" \
    refused.txt
rm -f out.raw
assert_rc "-f raw converts the archive's bytes" 0 "$QIMG" convert -f raw -O raw one.ova out.raw
assert_rc "... as they are" 0 cmp out.raw one.ova

# ---- refused, naming the problem ----
err() { # DESC MESSAGE QIMG-ARGS...: exit 1, the message on stderr
    local desc=$1 msg=$2
    shift 2
    assert_rc "$desc: exit 1" 1 "$QIMG" "$@" &&
        { grep -qF -- "$msg" "$SCRATCH/.out" || _fail "$desc: $(cat "$SCRATCH/.out")"; }
}
ovf gz.ovf 'ovf:compression="gzip"' so.vmdk:f1:vmdisk1
tar --format=ustar -cf gz.ova gz.ovf so.vmdk
err "compressed member" "member 'so.vmdk' is gzip-compressed (ovf:compression)" \
    convert -O raw ova:0:gz.ova out.raw
err "compressed, one disk, no selector" "gzip-compressed" convert -O raw gz.ova out.raw
ovf miss.ovf "" so.vmdk:f1:vmdisk1 gone.vmdk:f2:vmdisk2
tar --format=ustar -cf miss.ova miss.ovf so.vmdk
err "member missing from the tar" "the file 'gone.vmdk' of disk 'vmdisk2' is not in the archive" \
    info miss.ova
sed 's/fileRef="f2"/fileRef="f9"/' vm.ovf >dangle.ovf
tar --format=ustar -cf dangle.ova dangle.ovf so.vmdk sp.vmdk
err "fileRef naming no File" "disk 'vmdisk2' names file 'f9' (ovf:fileRef), which no File" \
    convert -O raw ova:0:dangle.ova out.raw
head -c 200000 ustar.ova >trunc.ova
err "truncated tar" "'trunc.ova' is truncated: tar member 'sp.vmdk' needs" info trunc.ova
cp ustar.ova badsum.ova
so_hdr=$(sed -n 2p <("$QIMG" info --output=json ustar.ova | json_disks) | cut -d' ' -f5)
printf 'X' | dd of=badsum.ova bs=1 seek=$((so_hdr - 512)) conv=notrunc status=none
err "wrong header checksum" "bad tar header at offset $((so_hdr - 512)): wrong header checksum" \
    convert -O raw ova:1:badsum.ova out.raw
err "no such disk" "'ustar.ova' has no disk '7' (it has 2" info ova:7:ustar.ova
err "a write" "a disk inside an OVA archive can only be opened read-only" \
    io -c 'write 0 512' ova:0:ustar.ova
err "a target" "the ova protocol cannot create images" convert -O raw src.raw ova:0:new.ova

# ---- extents are members of the same archive, never host files ----
mkdir secret
head -c 1M /dev/urandom >secret/host.raw
SECRET=$PWD/secret/host.raw
cp secret/host.raw nearby.raw # beside the archive, not in it
desc() { # OUT EXTENT...: a monolithicFlat descriptor, 2048 sectors per extent
    local out=$1 e
    shift
    {
        printf '# Disk DescriptorFile\nversion=1\nCID=1234abcd\nparentCID=ffffffff\n'
        printf 'createType="monolithicFlat"\n\n# Extent description\n'
        for e in "$@"; do printf 'RW 2048 FLAT "%s" 0\n' "$e"; done
    } >"$out"
}
mkdir -p hostile
for case in "abs:$SECRET" "dotdot:../secret/host.raw" "proto:file:$SECRET" \
    "nearby:nearby.raw"; do
    name=${case%%:*}
    desc "hostile/$name.vmdk" "${case#*:}"
    ovf "hostile/$name.ovf" "" "$name.vmdk:f1:vmdisk1"
    tar --format=ustar -C hostile -cf "$name.ova" "$name.ovf" "$name.vmdk"
done
hostile() {
    local name
    for name in abs dotdot proto nearby; do
        for cmd in "convert -O raw" "map" "compare" "convert --trust-names -O raw"; do
            rm -f out.raw
            set -- $cmd
            case $1 in
            convert) args=("$@" "ova:0:$name.ova" out.raw) ;;
            compare) args=("$@" "ova:0:$name.ova" "ova:0:$name.ova") ;;
            *) args=("$@" "ova:0:$name.ova") ;;
            esac
            timeout 20 "$QIMG" "${args[@]}" >case.out 2>&1
            echo "$name|${args[*]}|$?|$(head -c 300 case.out)"
        done
    done >cases.log
}
export -f hostile
export QIMG
out=$("${WATCH[@]}" "$SECRET" nearby.raw -- bash -c hostile)
assert_eq "no hostile extent opens a host file" "$SECRET 0
nearby.raw 0" "$out"
while IFS='|' read -r name args rc msg; do
    want=1
    [ "${args%% *}" = compare ] && want=2
    _checks=$((_checks + 1))
    [ "$rc" = $want ] || _fail "$name: qimg $args exits $rc, expected $want"
    case $name in
    nearby) want="has no member 'nearby.raw'" ;;
    *) want="refused (a disk inside an OVA may only name members of its archive)" ;;
    esac
    _checks=$((_checks + 1))
    [[ "$msg" == *"$want"* ]] || _fail "$name: $args: $msg"
done <cases.log
assert_eq "every hostile case ran" 16 "$(wc -l <cases.log)"
# info names the extents, opening none
"${WATCH[@]}" "$SECRET" -- "$QIMG" info --output=json ova:0:abs.ova >watch.out
assert_eq "info of the hostile disk opens nothing" "$SECRET 0" "$(cat watch.out)"
assert_eq "... and shows the extent's name" "$SECRET" \
    "$("$QIMG" info --output=json ova:0:abs.ova |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["format-specific"]["data"]["extents"][0]["filename"])')"

# a descriptor whose extent is a member: read out of the archive
ovf flat.ovf "" flat.vmdk:f1:vmdisk1
tar --format=ustar -cf flat.ova flat.ovf flat.vmdk flat-flat.vmdk
rm -f out.raw
assert_rc "flat extent inside the archive" 0 "$QIMG" convert -O raw ova:0:flat.ova out.raw &&
    assert_rc "... reads as the source" 0 cmp out.raw src.raw
assert_eq "its extent name is the member" "ova:file=flat-flat.vmdk:flat.ova" \
    "$("$QIMG" info --output=json ova:0:flat.ova |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["format-specific"]["data"]["extents"][0]["filename"])')"

# a delta disk whose parent is a member of the same archive
"$QEMU_IMG" create -q -f vmdk base.vmdk 8M
"$QEMU_IO" -c 'write -P 0x44 0 2M' base.vmdk >/dev/null
"$QEMU_IMG" create -q -f vmdk -b base.vmdk -F vmdk delta.vmdk
"$QEMU_IO" -c 'write -P 0x55 1M 64k' delta.vmdk >/dev/null
ovf delta.ovf "" delta.vmdk:f1:vmdisk1
tar --format=ustar -cf delta.ova delta.ovf delta.vmdk base.vmdk
"$QEMU_IMG" convert -O raw delta.vmdk qdelta.raw
rm -f out.raw
assert_rc "delta disk: its parent read out of the archive" 0 \
    "$QIMG" convert -O raw delta.ova out.raw &&
    assert_rc "... as qemu-img reads the chain" 0 cmp out.raw qdelta.raw
assert_eq "delta disk: the parent's name" "ova:file=base.vmdk:delta.ova" \
    "$("$QIMG" info --output=json ova:0:delta.ova |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["full-backing-filename"])')"
sed 's|parentFileNameHint="base.vmdk"|parentFileNameHint="../a.vmdk"|' delta.vmdk >hostile/delta.vmdk
ovf hostile/delta.ovf "" delta.vmdk:f1:vmdisk1
tar --format=ustar -C hostile -cf hdelta.ova delta.ovf delta.vmdk
err "delta disk: a parent out of the archive" \
    "backing file '../a.vmdk' leads out of the image's folder with '..'; refused (a disk inside an OVA may only name members" \
    convert -O raw hdelta.ova out.raw
# info --backing-chain opens each layer as the chain's open resolves it
# (open.c invariant 6, qimg_image_open_backing): the parent is the member
layers() { # the layers of info --backing-chain --output=json ARGS: "filename format cid"
    "$QIMG" info --backing-chain --output=json "$@" 2>&1 | python3 -c 'import json, sys
try:
    print(" ".join("%s %s %s" % (x["filename"], x["format"],
                   x["format-specific"]["data"]["cid"]) for x in json.load(sys.stdin)))
except ValueError:
    print("not JSON")'
}
qcids=$("$QEMU_IMG" info --backing-chain --output=json delta.vmdk | python3 -c 'import json, sys
print(" ".join(str(x["format-specific"]["data"]["cid"]) for x in json.load(sys.stdin)))')
read -r qtop qbase <<<"$qcids"
assert_eq "info --backing-chain of a delta disk in an OVA: both layers, as qemu-img's" \
    "ova:0:delta.ova vmdk $qtop ova:file=base.vmdk:delta.ova vmdk $qbase" "$(layers ova:0:delta.ova)"
assert_eq "... the one-disk archive named alone" \
    "ova:0:delta.ova vmdk $qtop ova:file=base.vmdk:delta.ova vmdk $qbase" "$(layers delta.ova)"
assert_rc "... human output" 0 "$QIMG" info --backing-chain ova:0:delta.ova
grep -q "^image: ova:file=base.vmdk:delta.ova$" "$SCRATCH/.out" ||
    _fail "info --backing-chain (human) shows no parent layer: $(cat "$SCRATCH/.out")"
err "info --backing-chain: a parent out of the archive" \
    "backing file '../a.vmdk' leads out of the image's folder with '..'; refused" \
    info --backing-chain ova:0:hdelta.ova
# a name read from an image never selects the ova protocol on its own: a
# qcow2 outside any archive naming the member as its backing file opens a
# plain file of that name, a VMDK's parent hint naming it is refused
"$QEMU_IMG" create -q -f qcow2 -b "ova:file=base.vmdk:delta.ova" -F vmdk -u outside.qcow2 8M
err "a qcow2's backing name is not the ova protocol" \
    "Could not open 'ova:file=base.vmdk:delta.ova': No such file or directory" \
    info --backing-chain outside.qcow2
sed 's|parentFileNameHint="base.vmdk"|parentFileNameHint="ova:file=base.vmdk:delta.ova"|' \
    delta.vmdk >outside.vmdk
err "a VMDK's parent hint is not the ova protocol" "names a protocol" \
    info --backing-chain outside.vmdk
# a GNU tar whose first member is the OVF under a long name (a 'L' header
# first: the name lies past the 512 bytes a probe sees) probes as an OVA
LOVF=an-ovf-descriptor-with-a-member-name-longer-than-the-hundred-bytes-of-a-ustar-name-field.ovf
cp delta.ovf "$LOVF"
tar --format=gnu -cf lovf.ova "$LOVF" delta.vmdk base.vmdk
assert_eq "GNU long OVF name: probed as an OVA" "ova $LOVF" \
    "$("$QIMG" info --output=json lovf.ova | python3 -c 'import json, sys
j = json.load(sys.stdin)
print(j["format"], j.get("format-specific", {}).get("data", {}).get("descriptor"))')"
rm -f out.raw
assert_rc "GNU long OVF name: its disk converts" 0 "$QIMG" convert -O raw lovf.ova out.raw &&
    assert_rc "... as qemu-img reads the chain" 0 cmp out.raw qdelta.raw
finish
