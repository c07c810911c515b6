#!/bin/bash
# 209-image-opts-short-form: --image-opts lists read as QEMU's tools read
# them (tools/image-opts.c facts 1-4), against qemu-img, qemu-io and
# qemu-nbd 7.2; qimg took only "key=value" elements ("Invalid parameter").
#  - An element without '=' is a short-form boolean: "KEY" is KEY=on,
#    "noKEY" KEY=off, each with QEMU's two-line deprecation warning;
#    "help" and "?" without one; a trailing comma adds nothing.
#  - qemu-img and qemu-nbd read a first element without '=' as "file", a
#    node reference: "Cannot find device=..."; with file.KEY options beside
#    it, "Cannot reference an existing block device ..." (api/json-name.c
#    invariant 5); qemu-io has no implied key.
#  - An empty key is a key: "does not support the option ''"
#    (api/open-opts.c fact 1); "id" must be an identifier.
#  - With -U, a short-form noforce-share conflicts (after its warning).
#  - read-only as an option: "on" where the command writes is "Block node
#    is read-only", "off" opens read-write (qemu-io -r then writes), with
#    force-share "force-share=on can only be used with read-only images"
#    (api/json-opts.c invariant 5); qimg made the open read-only on "on"
#    and ignored "off".
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io qemu-nbd

qi create -q -f qcow2 t.qcow2 1M
qio t.qcow2 'write -P 7 0 64k'
qi create -q -f qcow2 u.qcow2 1M
F=driver=qcow2,file.filename=t.qcow2
lists=("t.qcow2" "t.qcow2,driver=qcow2" "$F,lazy-refcounts" "$F,nolazy-refcounts"
    "$F," "$F,,," ",$F" "$F,=x" "$F,id=1x" "$F,id=ok" "$F,help" "$F,?" "$F,nohelp"
    "driver=qcow2,t.qcow2" "t,,x=y,driver=qcow2" "$F,a,,b" "file=t.qcow2,$F"
    "file=x,driver=qcow2" "$F,force-share" "$F,noforce-share" "$F,read-only"
    "$F,noread-only" "$F,cache.direct" "$F,nocache.no-flush")
for l in "${lists[@]}"; do
    same_as_qemu_err info --image-opts "$l"
    same_as_qemu_err info -U --image-opts "$l"
    same_as_qemu_err check --image-opts "$l"
    same_as_qemu_err map --output=json --image-opts "$l"
    same_as_qemu_err compare --image-opts "$l" "driver=qcow2,file.filename=t.qcow2"
    same_as_qemu_err measure -O qcow2 --image-opts "$l"
    same_as_qemu_err snapshot -l --image-opts "$l"
    same_as_qemu_err convert -n --target-image-opts t.qcow2 "driver=qcow2,file.filename=u.qcow2,nolazy-refcounts"
    same_as_qemu_err convert --image-opts "$l" -O raw out.raw
done
# the warnings come before -U's conflict, as qemu-img reads the list first
same_as_qemu_err info -U --image-opts "$F,noforce-share,id=1x"
same_as_qemu_err convert --image-opts "$F,noforce-share" -U -O raw out.raw

# qemu-io: no implied file, every bare element a short-form boolean
for l in "${lists[@]}"; do
    same_as_qemu_io "qemu-io --image-opts '$l'" --image-opts -c 'read -P 7 0 64k' "$l"
    same_as_qemu_io "qemu-io -r --image-opts '$l'" -r --image-opts -c 'read 0 4k' "$l"
done

# read-only given as an option decides, as QEMU's BlockBackend asks
# (api/json-opts.c invariant 5): -r with read-only=off writes
IO_IMAGE=t2.qcow2 IO_FROM=t.qcow2 same_as_qemu_io "open -r -o read-only=off" \
    -c 'open -r -o read-only=off t2.qcow2' -c 'write -P 9 0 4k' -c 'read -P 9 0 4k'
IO_IMAGE=t2.qcow2 IO_FROM=t.qcow2 same_as_qemu_io "open -o read-only=on" \
    -c 'open -o read-only=on t2.qcow2' -c 'read -P 7 0 4k'
IO_IMAGE=t2.qcow2 IO_FROM=t.qcow2 same_as_qemu_io "-r --image-opts noread-only" \
    -r --image-opts -c 'write -P 9 0 4k' "driver=qcow2,file.filename=t2.qcow2,noread-only"
same_as_qemu_err resize --image-opts "$F,read-only=on" 2M
same_as_qemu_err info --image-opts "$F,read-only=off,force-share=on"

# qemu-nbd: the warnings, and the implied file's node reference
for l in "t.qcow2" "$F,lazy-refcounts,nodiscard-no-unref,id=1x" "file=x,$F"; do
    timeout 10 qemu-nbd --image-opts "$l" >q.out 2>q.err
    timeout 10 "$QIMG" nbd --image-opts "$l" >m.out 2>m.err
    assert_eq "nbd '$l': the warnings" "$(grep -A1 'warning:' q.err | sed 's/^qemu-nbd/qimg/')" \
        "$(grep -A1 'warning:' m.err)"
    for msg in "Cannot find device='t.qcow2'" "expects an identifier" "Cannot reference"; do
        assert_eq "nbd '$l': $msg" "$(grep -c "$msg" q.err)" "$(grep -c "$msg" m.err)"
    done
done
sock=$SCRATCH/n.sock
# one client (no -t): used once it listens, bounded wait for its end
"$QIMG" nbd -r -k "$sock" --pid-file "$SCRATCH/n.pid" --image-opts \
    "$F,force-share,read-only" 2>m.err &
srv=$!
trap 'kill $srv 2>/dev/null; _cleanup' EXIT
nbd_listening "$sock" "$SCRATCH/n.pid" $srv || finish
assert_eq "nbd serves a short-form list" "read 65536/65536 bytes at offset 0" \
    "$(timeout 60 qemu-io -r -f raw -c 'read -P 7 0 64k' "nbd+unix:///?socket=$sock" |
        head -n 1)"
server_left $srv "qimg nbd"
assert_eq "nbd: its warnings" "2" "$(grep -c 'short-form boolean option' m.err)"
finish
