#!/bin/bash
# qimg io's open -o and reopen -o with QEMU's block options (issue 29 item
# 1; tools/io-open.c fact 5, api/json-name.c invariant 7, json-opts.c invariant 3,
# api/open-opts.c), against qemu-io 7.2 on copies of the same images: the
# same stdout, stderr, exit code, image contents and header feature bits.
#  - open -o KEY=VALUE for the generic options (node-name, read-only,
#    force-share, discard, auto-read-only) and qcow2's (lazy-refcounts, the
#    cache sizes and their checks), checked against the probed format;
#  - driver= winning over a json: name's driver, options with no path;
#  - backing.* options for the image's own backing file (QEMU 114, 130);
#  - reopen -o: the overlap and cache-size options joined as QEMU's qcow2
#    joins them; lazy-refcounts switched at run time, the dirty bit after a
#    kill (QEMU 039), what reopen cannot change (node-name, driver, other
#    options; QEMU 133), -r/-w and -c against read-only and cache options;
#  - --image-opts: an open failure reads "can't open: REASON" (QEMU 188).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3

filter() {
    sed -e 's/[0-9]* ops; [0-9/:. sec]* ([0-9/.inf]* [EPTGMKiBbytes]*\/sec and [0-9/.inf]* ops\/sec)/X ops; TIME/' \
        -e 's/^qemu-io: /qimg: /' -e 's/qemu-io> //g' -e 's/qimg-io> //g' \
        -e '/Killed/d'
}
# filter_var VAR FILE, filter_err_var VAR FILE: the same by the shell's
# builtins (common.sh filter_lines; assert_same_filtered takes them)
_filter_line() {
    [[ "$_l" =~ $_io_time_re ]] && _l=${_l/"${BASH_REMATCH[0]}"/X ops; TIME}
    [[ "$_l" != "qemu-io: "* ]] || _l="qimg: ${_l#qemu-io: }"
    _l=${_l//"qemu-io> "/}
    _l=${_l//"qimg-io> "/}
    [[ "$_l" != *Killed* ]] || _drop=1
}
_filter_err_line() {
    _filter_line
    [[ "$_l" =~ node\ \'[^\']*\'\ cannot ]] && _l=${_l/"${BASH_REMATCH[0]}"/"node 'X' cannot"}
}
filter_var() { filter_lines "$1" "$2" _filter_line; }
filter_err_var() { filter_lines "$1" "$2" _filter_err_line; }

# incompat IMG: the incompatible feature bits of IMG's header
incompat() {
    python3 -c 'import struct,sys; d=open(sys.argv[1],"rb").read(80); print(struct.unpack(">Q", d[72:80])[0])' "$1"
}

# both DESC IMG ARGS...: qemu-io ARGS in q/ on a copy of IMG (as "img",
# with "base" beside it), qimg io in m/ on another: outputs and exit code.
# both_img: the images too (contents, incompatible feature bits).
mkdir -p q m
both() {
    local desc=$1 img=$2 qrc mrc
    shift 2
    # (one tee for both copies, cd rather than subshells, the filters only
    # for outputs that differ: a process costs ~8 ms of CPU, see common.sh)
    # (base, the backing file, again only where it can be opened: under
    # the image that has it, or named by a backing option)
    tee q/img m/img <"$img" >/dev/null || exit 1
    if [ ! -e q/base ] || [ "$img" = top.qcow2 ] || [[ "$*" == *backing* ]]; then
        tee q/base m/base <base.qcow2 >/dev/null || exit 1
    fi
    cd q || exit 1
    timeout 30 "$QEMU_IO" "$@" >../q.out 2>../q.err
    qrc=$?
    cd ../m || exit 1
    timeout 30 "$QIMG" io "$@" >../m.out 2>../m.err
    mrc=$?
    cd .. || exit 1
    assert_eq "$desc: exit code" "$qrc" "$mrc"
    assert_same_filtered "$desc: stdout" filter q.out m.out
    assert_same_filtered "$desc: stderr" filter_err q.err m.err
}
filter_err() { filter | filter_node; }
# QEMU names a read-write node it cannot reopen read-only by its generated
# name ('#blockNNN'); qimg by its node-name or file name
filter_node() { sed -e "s/node '[^']*' cannot/node 'X' cannot/"; }
both_img() {
    both "$@"
    assert_rc "$1: contents" 0 "$QEMU_IMG" compare -q -U -f qcow2 -F qcow2 q/img m/img
    assert_eq "$1: incompatible features" "$(incompat q/img)" "$(incompat m/img)"
}

qi create -q -f qcow2 base.qcow2 64M
qio base.qcow2 'write -P 7 0 1M'
qi create -q -f qcow2 a.qcow2 64M
qio a.qcow2 'write -P 1 0 64k'
qi create -q -f qcow2 -o compat=0.10 v2.qcow2 64M
qi create -q -f qcow2 -u -b base -F qcow2 top.qcow2 64M
qi create -q -f qcow2 -o lazy_refcounts=on lazy.qcow2 64M
truncate -s 1M raw.img

# ---- open -o: generic and qcow2 options (probed format) ----
for o in foo=bar lazy-refcounts=on lazy-refcounts=off lazy-refcounts=x nolazy-refcounts \
    lazy-refcounts node-name=n1 node-name=1x node-name=a234567890123456789012345678901 \
    node-name=a2345678901234567890123456789012 file.node-name=f1 file.foo=1 \
    discard=unmap discard=x auto-read-only=off auto-read-only=x \
    force-share=on cache-size=1.25M cache-size=0 cache-size=1x \
    cache-size=99999999999999999999 l2-cache-size=1M refcount-cache-size=0.25M \
    cache-size=1.25M,l2-cache-size=1M,refcount-cache-size=0.25M \
    cache-size=1M,l2-cache-size=2M cache-size=1M,refcount-cache-size=2M \
    cache-size=2M,l2-cache-size=1M l2-cache-entry-size=256 l2-cache-entry-size=4242 \
    l2-cache-entry-size=128k l2-cache-entry-size=64k read-only=on read-only=x \
    driver=raw driver=qcow2 file.filename=img filename=img a=b,,c 'a=b,c=d'; do
    both "open -o $o" a.qcow2 -c "open -o $o img" -c 'read -P 1 0 64k' -c 'write -P 2 0 4k'
done
both_img "open -o lazy-refcounts=on, write" a.qcow2 -c 'open -o lazy-refcounts=on img' \
    -c 'write -P 2 0 4k'
both_img "open -o cache-size=0, write" a.qcow2 -c 'open -o cache-size=0 img' \
    -c 'write -P 2 1M 4k'

both "open -r -o read-only=on" a.qcow2 -c 'open -r -o read-only=on img' -c 'read -P 1 0 4k'
both "open -r -U -o force-share=on" a.qcow2 -c 'open -r -U -o force-share=on img' \
    -c 'read -P 1 0 4k'
both "lazy on a v2 image" v2.qcow2 -c 'open -o lazy-refcounts=on img' -c 'read 0 1'
both "two -o" a.qcow2 -c 'open -o driver=qcow2 -o node-name=x img' -c 'read -P 1 0 4k'
both "cache.direct with -o" a.qcow2 -c 'open -o cache.direct=on,node-name=x img' \
    -c 'read -P 1 0 4k'

# ---- overlap-check: which metadata a write is checked against ----
# cluster 0's L2 entry -> the refcount table: an in-place write there
# overlaps it (meta.c invariant 1)
cp a.qcow2 ol.qcow2
python3 - ol.qcow2 <<'PY'
import struct, sys
with open(sys.argv[1], "r+b") as f:
    d = f.read(1 << 20)
    l1 = struct.unpack(">Q", d[40:48])[0]
    l2 = struct.unpack(">Q", d[l1:l1 + 8])[0] & 0x00fffffffffffe00
    f.seek(l2)
    f.write(struct.pack(">Q", (1 << 63) | struct.unpack(">Q", d[48:56])[0]))
PY
for o in overlap-check=cached overlap-check=none overlap-check=constant overlap-check=all \
    overlap-check=x overlap-check.template=none overlap-check.refcount-table=off \
    overlap-check=none,overlap-check.refcount-table=on overlap-check.refcount-table=x \
    overlap-check=none,overlap-check.template=all; do
    both "open -o $o" ol.qcow2 -c "open -o $o img" -c 'write -P 9 0 4k'
    assert_rc "open -o $o: same file" 0 cmp q/img m/img
done

# ---- driver= over a json: name's; options alone ----
both "driver over json" a.qcow2 \
    -c 'open -o driver=qcow2 json:{"driver":"raw","file.filename":"img"}' -c 'read -P 1 0 4k'
both "json with driver" a.qcow2 -c 'open json:{"driver":"raw","file.filename":"img"}' \
    -c 'read -P 1 0 4k'
both "options alone" a.qcow2 -c 'open -o driver=qcow2,file.filename=img' -c 'read -P 1 0 4k'
both "options alone, no file" a.qcow2 -c 'open -o driver=qcow2'
both "file twice" a.qcow2 -c 'open -o file.filename=img img'
both "no path, no -o" a.qcow2 -c 'open'

# ---- backing options for the image's own backing file ----
for o in backing.node-name=b backing.driver=qcow2 backing.driver=raw backing.foo=on \
    backing.file.filename=base backing.file.filename=base,backing.driver=qcow2; do
    both "open -o $o" top.qcow2 -c "open -o $o img" -c 'read -P 7 0 4k'
    both "open -o $o, no backing" a.qcow2 -c "open -o $o img" -c 'read 0 4k'
done
both "lazy with backing options" top.qcow2 \
    -c 'open -o backing.file.filename=base,backing.driver=qcow2,lazy-refcounts=on img' \
    -c 'write 0 4k'

# ---- reopen -o ----
both_img "reopen lazy on, killed" a.qcow2 -c 'reopen -o lazy-refcounts=on' \
    -c 'write -P 3 1M 512' -c 'sigraise 9' img
assert_eq "dirty after kill" "1" "$(incompat m/img)"
both_img "reopen lazy off, killed" lazy.qcow2 -c 'reopen -o lazy-refcounts=off' \
    -c 'write -P 3 1M 512' -c 'sigraise 9' img
assert_eq "clean after kill" "0" "$(incompat m/img)"
for o in node-name=foo file.node-name=foo backing.node-name=foo driver=raw \
    file.driver=qcow2 backing.driver=file driver=qcow2 file.driver=file \
    backing.driver=qcow2 a=b file.a=b backing.a=b backing.file.a=b \
    read-only=foo cache.no-flush=bar cache.direct=baz auto-read-only=qux \
    cache-size=2M lazy-refcounts=on read-only=on; do
    both "reopen -o $o" top.qcow2 -c "reopen -o $o" -c 'read -P 7 0 4k' img
    both "reopen -o $o, no backing" a.qcow2 -c "reopen -o $o" -c 'read -P 1 0 4k' img
done
# a reopen's new overlap template or cache sizes replace the old ones as a
# group (QEMU's qcow2 option joining, QEMU iotest 137); the same new
# options given together still conflict
both "reopen: overlap-check replaced by a template" a.qcow2 \
    -c 'reopen -o overlap-check=constant' -c 'reopen -o overlap-check.template=all' \
    -c 'reopen -o overlap-check.main-header=off' -c 'reopen -o overlap-check=none' \
    -c 'reopen -o overlap-check.template=cached' -c 'read -P 1 0 4k' img
both "reopen: cache sizes replaced" a.qcow2 -c 'reopen -o cache-size=1M' \
    -c 'reopen -o l2-cache-size=512k' -c 'reopen -o refcount-cache-size=128k' \
    -c 'reopen -o cache-size=2M' -c 'reopen -o l2-cache-size=64k' -c 'read -P 1 0 4k' img
both "reopen: conflicting new options" a.qcow2 \
    -c 'reopen -o overlap-check=constant,overlap-check.template=all' \
    -c 'reopen -o cache-size=1M,l2-cache-size=64k,refcount-cache-size=64k' \
    -c 'read -P 1 0 4k' img
for o in node-name=foo file.node-name=foo backing.node-name=foo; do
    both "open -o $o, reopen" top.qcow2 -c "open -o $o img" -c "reopen -o $o" \
        -c 'reopen' -c 'read -P 7 0 4k'
done
both "reopen -r -o read-only" a.qcow2 -c 'reopen -r -o read-only=on' img
both "reopen -w -o read-only" a.qcow2 -c 'reopen -w -o read-only=on' img
both "reopen -c none -o cache.direct" a.qcow2 -c 'reopen -c none -o cache.direct=on' img
both "reopen -c directsync -o cache.no-flush" a.qcow2 \
    -c 'reopen -c directsync -o cache.no-flush=on' img
both_img "reopen keeps the open's options" a.qcow2 -c 'open -o lazy-refcounts=on img' \
    -c 'reopen -o cache-size=1M' -c 'write -P 4 2M 512' -c 'sigraise 9'
assert_eq "kept lazy-refcounts" "1" "$(incompat m/img)"

both "--image-opts: an open failure" a.qcow2 -c 'read 0 512' --image-opts \
    driver=qcow2,file.filename=nonexistent.qcow2

finish
