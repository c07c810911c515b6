#!/bin/bash
# Images from strangers (block/names.c, DESIGN "Images from strangers";
# OpenStack's CVE-2022-47951): a VMDK whose extent or parent names a host
# file -- an absolute path, "..", a symbolic link out of its folder, a
# protocol name, a FIFO or device -- is refused by every command before
# the file is opened (inotify sees no open of it: iotests/watch-open.py);
# qimg info opens no extent and shows every name in its JSON; with
# --trust-names the same images read the file (the watcher's control).
. "${0%/*}/../common.sh"
requires qimg qemu-img python3

WATCH=("python3" "$IOTESTS_DIR/watch-open.py")
mkdir img secret
head -c 1M /dev/urandom >secret/host.raw
"$QEMU_IMG" create -q -f vmdk secret/base.vmdk 1M
"$QEMU_IO" -c 'write -P 0x55 0 64k' secret/base.vmdk >/dev/null
SECRET=$PWD/secret/host.raw
BASE=$PWD/secret/base.vmdk
ln -s ../secret/host.raw img/hostlink
mkfifo img/fifo
cp secret/host.raw img/inside.raw # a file that may be named

flat_desc() { # name, then extent names (FLAT, 2048 sectors each)
    local out=$1 e
    shift
    {
        printf '# Disk DescriptorFile\nversion=1\nCID=1234abcd\nparentCID=ffffffff\n'
        printf 'createType="monolithicFlat"\n\n# Extent description\n'
        for e in "$@"; do printf 'RW 2048 FLAT "%s" 0\n' "$e"; done
    } >"img/$out"
}
flat_desc abs.vmdk "$SECRET"
flat_desc dotdot.vmdk ../secret/host.raw
flat_desc link.vmdk hostlink
flat_desc proto.vmdk "file:$SECRET"
flat_desc json.vmdk 'json:{}'
flat_desc fifo.vmdk fifo
flat_desc dev.vmdk /dev/zero
flat_desc mixed.vmdk inside.raw ../secret/host.raw
# delta disks whose parent hint leads out (qemu-img records what -b says)
"$QEMU_IMG" create -q -f vmdk -b "$BASE" -F vmdk img/parent-abs.vmdk
(cd img && "$QEMU_IMG" create -q -f vmdk -b ../secret/base.vmdk -F vmdk parent-dotdot.vmdk)
flat_desc ok.vmdk inside.raw

# ---- refused, and the host file never opened ----
# Every command on every image runs under one watcher (one python start):
# each case's exit code and message go to cases.log, the watcher proves
# that none of them opened a watched file.
matrix() {
    local img f cmd rc
    for img in abs dotdot link proto json fifo dev mixed parent-abs parent-dotdot; do
        f=img/$img.vmdk
        for cmd in "info --backing-chain" "map --output=json" "convert -O raw" "check" \
            "compare" "measure -O qcow2" "dd"; do
            set -- $cmd
            case $1 in
            convert) args=("$@" "$f" out.raw) ;;
            compare) args=("$@" "$f" img/ok.vmdk) ;;
            dd) args=(dd if="$f" of=out.raw bs=64k count=1) ;;
            *) args=("$@" "$f") ;;
            esac
            rm -f out.raw
            timeout 20 "$QIMG" "${args[@]}" >case.out 2>&1
            rc=$?
            grep -q "refused (trust the image's names" case.out && msg=refused || msg=none
            echo "$img|${args[*]}|$rc|$msg"
        done
    done >cases.log
}
export -f matrix
export QIMG
out=$("${WATCH[@]}" "$SECRET" "$BASE" img/fifo -- bash -c matrix)
assert_eq "no refused case opens what it names" "$SECRET 0
$BASE 0
img/fifo 0" "$out"
while IFS='|' read -r img args rc msg; do
    want=1
    [ "${args%% *}" = compare ] && want=2 # qemu-img compare's "error" exit code
    _checks=$((_checks + 1))
    [ "$rc" = $want ] || _fail "$img: qimg $args exits $rc, expected $want"
    [ "$msg" = refused ] || _fail "$img: $args: no refusal message"
done <cases.log
assert_eq "every case ran" 70 "$(wc -l <cases.log)"
# the messages name the name and the reason
assert_rc "absolute" 1 "$QIMG" convert -O raw img/abs.vmdk out.raw
grep -qF "extent '$SECRET' is an absolute path; refused" "$SCRATCH/.out" ||
    _fail "absolute: $(cat "$SCRATCH/.out")"
assert_rc "symbolic link" 1 "$QIMG" map img/link.vmdk
grep -qF "extent 'hostlink' resolves to '$SECRET', outside the image's folder" \
    "$SCRATCH/.out" || _fail "link: $(cat "$SCRATCH/.out")"
assert_rc "fifo" 1 "$QIMG" map img/fifo.vmdk
grep -qF "extent 'fifo' is not a regular file" "$SCRATCH/.out" ||
    _fail "fifo: $(cat "$SCRATCH/.out")"
assert_rc "parent" 1 "$QIMG" convert -O raw img/parent-dotdot.vmdk out.raw
grep -qF "Could not open backing file: backing file '../secret/base.vmdk' leads out of" \
    "$SCRATCH/.out" || _fail "parent: $(cat "$SCRATCH/.out")"

# ---- info without --backing-chain: opens nothing, shows every name ----
infos() {
    local img
    for img in abs dotdot link proto mixed parent-abs parent-dotdot; do
        "$QIMG" info --output=json img/$img.vmdk >/dev/null 2>&1 && "$QIMG" info img/$img.vmdk \
            >/dev/null 2>&1
        echo "$img $?"
    done >infos.log
}
export -f infos
out=$("${WATCH[@]}" "$SECRET" "$BASE" -- bash -c infos)
assert_eq "info opens nothing" "$SECRET 0
$BASE 0" "$out"
assert_eq "info succeeds" "abs 0 dotdot 0 link 0 proto 0 mixed 0 parent-abs 0 parent-dotdot 0" \
    "$(tr '\n' ' ' <infos.log | sed 's/ $//')"
names() { python3 -c 'import json, sys
i = json.load(open(sys.argv[1]))
print(" ".join([e["filename"] for e in i["format-specific"]["data"]["extents"]] +
               [i.get("backing-filename", "-")]))' "$1"; }
"$QIMG" info --output=json img/mixed.vmdk >info.json
assert_eq "mixed: every extent name" "img/inside.raw img/../secret/host.raw -" \
    "$(names info.json)"
"$QIMG" info --output=json img/abs.vmdk >info.json
assert_eq "abs: the extent name" "$SECRET -" "$(names info.json)"
"$QIMG" info --output=json img/parent-dotdot.vmdk >info.json
assert_eq "parent: the parent name" "img/parent-dotdot.vmdk ../secret/base.vmdk" \
    "$(names info.json)"

# ---- trusted: the control (the watcher sees the opens, the bytes arrive) ----
for img in abs dotdot link proto mixed; do
    rm -f out.raw
    out=$("${WATCH[@]}" "$SECRET" -- "$QIMG" convert --trust-names -O raw img/$img.vmdk out.raw)
    _checks=$((_checks + 1))
    [ "$out" != "$SECRET 0" ] || _fail "$img: --trust-names: the host file was not read"
done
assert_rc "trusted abs: the host file's bytes" 0 cmp out.raw <(cat secret/host.raw secret/host.raw)
"$QIMG" --trust-names convert -O raw img/parent-dotdot.vmdk out.raw
"$QEMU_IMG" convert -O raw img/parent-dotdot.vmdk qout.raw
assert_rc "trusted parent reads as qemu-img" 0 cmp out.raw qout.raw
assert_rc "trusted, --trust-names after the file" 0 \
    "$QIMG" info --backing-chain img/parent-abs.vmdk --trust-names
# a name that stays inside the folder needs no trust
assert_rc "ok.vmdk" 0 "$QIMG" convert -O raw img/ok.vmdk out.raw
assert_rc "ok.vmdk's bytes" 0 cmp out.raw secret/host.raw

finish
