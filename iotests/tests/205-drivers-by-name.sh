#!/bin/bash
# 205-drivers-by-name: the drivers qimg lists and the drivers it opens by
# name are the same set (api/formats.c invariant 4).
#  - qemu-img --help (qimg's, under both names) ends its parameters with
#    qemu-img's "Supported formats:" line; QEMU's harness reads "quorum"
#    there before it runs its quorum tests (148: "quorum support missing").
#  - Every name on it opens: as -f NAME, or as "driver": NAME in a json:
#    name (neither says "Unknown driver"); every QEMU driver name not on it
#    is refused (qimg_format_list has no name it cannot open, and no
#    driver it opens is missing from it).
#  - vmdk, vpc, vhdx, vdi and qed open by "driver" in json: names, by
#    --image-opts and by qemu-io's open -o as qemu-img and qemu-io open
#    them (qimg said "Unknown driver 'vmdk'" to any format but qcow2, raw
#    and luks), with their options checked as QEMU checks them.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

ln -s "$QIMG" qemu-img
for tool in "$QIMG" ./qemu-img; do
    "$tool" --help >help.out
    assert_rc "$tool --help: exit code" 0 "$tool" --help
    line=$(grep '^Supported formats: ' help.out)
    assert_eq "$tool --help: one Supported formats line" 1 \
        "$(grep -c '^Supported formats:' help.out)"
    [[ " ${line#Supported formats:} " == *" quorum "* ]] ||
        _fail "$tool --help: no quorum in '$line'"
    _checks=$((_checks + 1))
done
read -r -a listed <<<"${line#Supported formats:}"
sorted=$(printf '%s\n' "${listed[@]}" | LC_ALL=C sort -u)
assert_eq "the list is sorted, each name once" "$sorted" "$(printf '%s\n' "${listed[@]}")"
for d in qcow2 raw luks vmdk vpc vhdx vdi qed file nbd null-co blkdebug blkverify quorum \
    copy-on-read; do
    [[ " ${listed[*]} " == *" $d "* ]] || _fail "'$d' is not listed"
    _checks=$((_checks + 1))
done

qi create -q -f qcow2 t.qcow2 1M
# opens NAME: -f NAME or "driver": NAME does not say "Unknown driver"
opens() {
    local f j
    f=$("$QIMG" info -f "$1" t.qcow2 2>&1)
    j=$("$QIMG" info "json:{\"driver\": \"$1\"}" 2>&1)
    [[ "$f" != *"Unknown driver"* || "$j" != *"Unknown driver"* ]]
}
for d in "${listed[@]}"; do
    opens "$d" || _fail "'$d' is listed and does not open by name"
    _checks=$((_checks + 1))
done
# QEMU's driver names (qemu-img 7.2's own list), those qimg does not list
qemu_list=$("$QEMU_IMG" --help | grep '^Supported formats:')
for d in ${qemu_list#Supported formats:} blkreplay io_uring nvme-io_uring; do
    [[ " ${listed[*]} " == *" $d "* ]] && continue
    if opens "$d" &&
        [[ "$("$QIMG" info -f "$d" t.qcow2 2>&1)" != *"is not supported by qimg"* ]]; then
        _fail "'$d' opens by name and is not listed"
    fi
    _checks=$((_checks + 1))
done

# the other formats by "driver": json:, --image-opts, qemu-io open -o
for f in vmdk vpc vhdx vdi qed; do
    "$QEMU_IMG" create -q -f "$f" "x.$f" 1M
    "$QEMU_IO" -f "$f" -c 'write -P 7 64k 4k' "x.$f" >/dev/null
    file="\"file\": {\"driver\": \"file\", \"filename\": \"x.$f\"}"
    for o in '' ', "read-only": true' ', "lazy-refcounts": true' ', "bogus": 1' \
        ', "cache": {"direct": false}' ', "backing": null' ', "force_size_calc": "chs"'; do
        j="json:{\"driver\": \"$f\", $file$o}"
        same_as_qemu_err info "$j"
        same_as_qemu_err info --output=json "$j"
        same_as_qemu_io "qemu-io $f$o" -r -c 'read -P 7 64k 4k' -c 'read -P 0 0 4k' "$j"
    done
    same_as_qemu_err info --image-opts "driver=$f,file.filename=x.$f"
    same_as_qemu_err info --image-opts "driver=$f,file.filename=x.$f,bogus=1"
    same_as_qemu_err compare --image-opts "driver=$f,file.filename=x.$f" \
        "driver=file,filename=x.$f"
    same_as_qemu_io "qemu-io open -o $f" -c "open -r -o driver=$f,file.filename=x.$f" \
        -c 'read -P 7 64k 4k'
    # a format over a file of another format: the lower one's bytes
    same_as_qemu_err info "json:{\"driver\": \"$f\", \"file\": {\"driver\": \"raw\", $file}}"
    # written through a json: name (qimg reads QED images, writes none)
    [ "$f" != qed ] || continue
    cp "x.$f" "w.$f"
    IO_RAW=1 IO_IMAGE="w.$f" IO_FROM="x.$f" same_as_qemu_io "qemu-io write $f" \
        -c 'write -P 9 128k 8k' \
        "json:{\"driver\": \"$f\", \"file\": {\"driver\": \"file\", \"filename\": \"w.$f\"}}"
done

# vpc's force_size_calc (open-opts.c fact 8, vpc/codec.c invariant 2): a
# size CHS cannot hold, with the creator "qemu" (CHS) and "qem2"
# (force_size=on: current_size)
"$QEMU_IMG" create -q -f vpc c.vpc 1000000
"$QEMU_IMG" create -q -f vpc -o force_size=on s.vpc 1000000
"$QEMU_IMG" create -q -f vpc -o subformat=fixed,force_size=on fx.vpc 1000000
for img in c.vpc s.vpc fx.vpc; do
    file="\"file\": {\"driver\": \"file\", \"filename\": \"$img\"}"
    for calc in chs current_size none '' CHS; do
        for d in '"driver": "vpc", ' ''; do
            j="json:{$d$file, \"force_size_calc\": \"$calc\"}"
            same_as_qemu_err info "$j"
            same_as_qemu_io "qemu-io $img $d$calc" -r -c 'length' -c 'read -P 0 0 4k' "$j"
        done
        same_as_qemu_err info --image-opts "driver=vpc,file.filename=$img,force_size_calc=$calc"
    done
    # (a null is no option; QEMU's name keeps it as null, qimg's does not)
    assert_eq "$img: force_size_calc null is none" \
        "$("$QEMU_IMG" info -f vpc --output=json "$img" | grep virtual-size)" \
        "$("$QIMG" info --output=json "json:{\"driver\": \"vpc\", $file, \"force_size_calc\": null}" |
            grep virtual-size)"
done
# not an option of other formats
same_as_qemu_err info "json:{\"driver\": \"qcow2\", \"file\": {\"driver\": \"file\",
    \"filename\": \"t.qcow2\"}, \"force_size_calc\": \"chs\"}"
finish
