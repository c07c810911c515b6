#!/bin/bash
# 204-qemu-suite-args: command lines from QEMU 7.2's qcow2 iotests outside
# the quick group, against qemu-img 7.2:
#  - 049: an empty backing file name (-b '', -o backing_file=), refused
#    before any other backing check, -u or not (tools/create.c fact 6);
#    qimg tried to open it ("Expecting one image file name").
#  - 178: measure --image-opts without a file name ("--image-opts, -f,
#    and -l require a filename argument."; qimg said "Either --size N
#    ..."), and -l snapshot.KEY=... read as an option list when met, an
#    unknown key refused before anything else with QEMU's two lines, ",,"
#    a comma in a name (tools/options.c fact 3; measure and convert); qimg
#    took "snapshot.foo=bar" for a snapshot's name.
#  - 142: create -f file, the file protocol as the format: raw's file and
#    options, "file" in the messages (tools/optlist.c fact 7, api/image.c
#    invariant 6); qimg printed "Formatting" and then "Unknown file format".
#  - 126: create of a "file:" name creates the file without the prefix
#    (protocol.c invariant 5), as opening it does; qimg created nothing
#    ("Could not create 'file:...'", or a lock error for a relative name).
#    A "file:" name with a colon before its first '/' is "./NAME", in
#    messages and as the image's name (protocol.c invariant 7); qimg said
#    "NAME".
#  - 126: a relative backing name is joined to the image's name up to its
#    last '/' as written, QEMU's path_combine (block.h's
#    blk_resolve_backing_name): "./top" has its backing file at "./base";
#    qimg said "base" (and no "actual path").
#  - 112: -o refcount_bits=-1 (tools/optlist.c fact 8).
#  - 061: amend -o compat=0.10 refuses an image with an internal snapshot
#    whose disk size is not the image's (after amend's size step), as
#    QEMU: "Internal snapshots prevent downgrade of image" (qcow2/amend.c
#    invariant 3); qimg downgraded, and the v2 snapshot lost its size.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

# 049: empty backing names
qi create -q -f qcow2 base.qcow2 1M
for args in "-b ''" "-u -b ''" "-b '' -F qcow2" "-u -b '' -F raw" "-o backing_file=" \
    "-o backing_file=,backing_fmt=qcow2" "-o size=1M -b ''"; do
    rm -f e.qcow2
    eval "same_as_qemu_err create -f qcow2 $args e.qcow2 1M"
    assert_eq "create $args: no image left" "" "$(ls e.qcow2 2>/dev/null)"
done
same_as_qemu_err create -f qcow2 -b '' e.qcow2

# 178: measure's and convert's argument checks
qi create -q -f qcow2 m.qcow2 1M
qio m.qcow2 'write -P 1 0 64k'
qi snapshot -c 'x,y' m.qcow2
qi snapshot -c plain m.qcow2
for args in "" "--image-opts" "-f qcow2" "-l snap1" "--image-opts -O raw" \
    "-l snapshot.foo=bar" "-l snapshot.foo=bar m.qcow2" "-l snapshot.id=1,foo=3 m.qcow2" \
    "-l snapshot.name=plain,snapshot.foo=1 m.qcow2" "-l snapshot.foo=bar --size 1M" \
    "-l snapshot.foo=bar --output foo" "-o , -l snapshot.foo=bar" \
    "-l snapshot.name=x,,y m.qcow2" "-l snapshot.name=x,,y --output=json m.qcow2" \
    "-l snapshot.id=1 m.qcow2" "-l snapshot.name=plain m.qcow2" \
    "-l snapshot.name=nosuch m.qcow2" "-l snapshot.name=x m.qcow2" "-l x,y m.qcow2" \
    "-l 'snapshot.name=x,,y,snapshot.bad' m.qcow2" "-l snapshot.name=plain,snapshot.id m.qcow2" \
    "-l snapshot.id=1,snapshot.id= m.qcow2" \
    "-l snapshot.id=1,,2 m.qcow2"; do
    eval "same_as_qemu_err measure $args"
done
for args in "-l snapshot.foo=bar m.qcow2 c.raw" "-l snapshot.foo=bar" \
    "-l snapshot.id=1,foo=3 -O raw m.qcow2 c.raw" "-l snapshot.name=x,,y -O raw m.qcow2 c.raw" \
    "-l snapshot.name=nosuch -O raw m.qcow2 c.raw"; do
    rm -f c.raw
    eval "same_as_qemu_err convert $args"
done
qi convert -l snapshot.name=x,,y -O raw m.qcow2 want.raw
rm -f c.raw
assert_rc "convert -l snapshot.name=x,,y" 0 "$QIMG" convert -l snapshot.name=x,,y -O raw \
    m.qcow2 c.raw
assert_rc "convert -l snapshot.name=x,,y: contents" 0 cmp want.raw c.raw

# 142: create -f file
for args in "f.file 1000" "-o preallocation=falloc f.file 1M" \
    "-o preallocation=full f.file 100k" "-o nocow=on,extent_size_hint=1M f.file 4k" \
    "-o preallocation=full,cluster_size=4k f.file 1M" \
    "-o compat=v3 f.file 1M" "-b base.qcow2 -F qcow2 f.file 1M" "-o help" "-o help f.file" \
    "-o size=2k f.file" "f.file"; do
    rm -f f.file
    eval "$QEMU_IMG create -f file $args" >/dev/null 2>&1
    want=$(stat -c '%s %b' f.file 2>/dev/null)
    rm -f f.file
    eval "same_as_qemu_err create -f file $args"
    assert_eq "create -f file $args: size and blocks" "$want" \
        "$(stat -c '%s %b' f.file 2>/dev/null)"
done
qi create -q -f file f.file 64k
qio f.file 'write -P 3 0 1k'
same_as_qemu_err info f.file

# 126: "file:" names, a colon in the name too
mkdir d
for name in "file:fx.qcow2" "file:a:b.qcow2" "file:$SCRATCH/d/c:d.qcow2" \
    "file:d/nosuch/x.qcow2"; do
    plain=${name#file:}
    rm -f "$plain"
    same_as_qemu_err create -f qcow2 "$name" 1M
    rm -f "$plain"
    "$QIMG" create -q -f qcow2 "$name" 1M 2>/dev/null
    if [ "$name" = file:d/nosuch/x.qcow2 ]; then
        assert_eq "create $name: nothing" "" "$(ls d/nosuch 2>/dev/null)"
    else
        case $plain in /*) ;; *) plain=./$plain ;; esac
        assert_rc "create $name: $plain checks clean" 0 "$QEMU_IMG" check -q "$plain"
    fi
    same_as_qemu_err create -f raw "$name" 64k
    same_as_qemu_err info "$name"
done
qi create -q -f qcow2 ./a:b.qcow2 1M
same_as_qemu_err create -f qcow2 -b ./a:b.qcow2 -F qcow2 "file:top:x.qcow2"
assert_eq "no file named file:..." "" "$(ls -d file:* d/file:* 2>/dev/null)"

# 126: backing names joined as QEMU's path_combine joins them
qi create -q -f qcow2 -b base.qcow2 -F qcow2 top.qcow2
qi create -q -f qcow2 -b ../base.qcow2 -F qcow2 d/top.qcow2
for name in ./top.qcow2 top.qcow2 "$SCRATCH/top.qcow2" ./d/top.qcow2 d/top.qcow2 \
    .//d/top.qcow2 file:top:x.qcow2; do
    same_as_qemu_err info --backing-chain "$name"
done

# 061: internal snapshots of another size prevent a downgrade
qi create -q -f qcow2 -o compat=0.10 s0.qcow2 32M
qio s0.qcow2 'write -P 0x2a 24M 64k'
qi snapshot -c foo s0.qcow2
qi amend -o compat=1.1,size=128M s0.qcow2
qi snapshot -c bar s0.qcow2
qi resize -q --shrink s0.qcow2 64M
cp s0.qcow2 s1.qcow2
qi snapshot -d bar s1.qcow2
for case in "s0 compat=0.10,size=32M" "s0 compat=0.10" "s0 compat=0.10,size=128M" \
    "s1 compat=0.10,size=32M" "s1 compat=0.10"; do
    read -r img o <<<"$case"
    cp "$img.qcow2" q.qcow2
    "$QEMU_IMG" amend -o "$o" q.qcow2 >q.out 2>q.err
    qrc=$?
    cp "$img.qcow2" m.qcow2
    "$QIMG" amend -o "$o" m.qcow2 >m.out 2>m.err
    STEP_FILTER=io_filter same_step "amend -o $o on $img" q.qcow2 m.qcow2 "$qrc" $?
    assert_eq "amend -o $o on $img: info" "$("$QEMU_IMG" info q.qcow2 | sed "1d;/^disk size/d")" \
        "$("$QEMU_IMG" info m.qcow2 | sed "1d;/^disk size/d")"
done

# 112: create/amend -o refcount_bits=-1: QemuOpts' numbers wrap and print
# back signed (tools/optlist.c fact 8); qimg said "expects a number"
rm -f rb.qcow2
for v in -1 -0x10 - " -1" 010 0x10 1x 18446744073709551616; do
    same_as_qemu_err create -f qcow2 -o "refcount_bits=$v" rb.qcow2 64M
    rm -f rb.qcow2
done
qi create -q -f qcow2 rb.qcow2 1M
for v in -1 -0x10 " -1"; do
    same_as_qemu_err amend -o "refcount_bits=$v" rb.qcow2
done
finish
