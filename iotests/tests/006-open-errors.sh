#!/bin/bash
# Every command's exit code when it cannot open an image equals qemu-img's,
# and so does the message for a missing file ("Could not open 'F': Could
# not open 'F': ..." from the file layer).  For a file that is not the
# format asked for or a truncated qcow2 header, qimg's message is
# qemu-img's plus the detail in parentheses (the value it found).
. "${0%/*}/../common.sh"
requires qimg qemu-img

# same_prefix ARGS...: same exit code and stdout; qimg's stderr is
# qemu-img's, possibly followed by " (detail)".
same_prefix() {
    same_as_qemu "$@" || return 1
    _checks=$((_checks + 1))
    local q=${Q_ERR#qimg: } m=${M_ERR#qimg: } # run_both rewrote the prefix
    if [ "$m" != "$q" ] && [[ "$m" != "$q ("*")" ]]; then
        _fail "stderr of '$*': qemu-img '$Q_ERR', qimg '$M_ERR'"
    fi
}

"$QEMU_IMG" create -q -f qcow2 good.qcow2 1M
truncate -s 1M plain.raw
head -c 50 good.qcow2 >short.qcow2

for how in same_as_qemu_err:missing.qcow2 same_prefix:short.qcow2; do
    cmp=${how%%:*} img=${how#*:}
    $cmp info "$img"
    $cmp info --output=json "$img"
    $cmp map "$img"
    $cmp check "$img"
    $cmp snapshot -l "$img"
    $cmp resize "$img" 2M
    $cmp compare "$img" good.qcow2
    $cmp compare good.qcow2 "$img"
    $cmp convert -O raw "$img" out.raw
    $cmp bench -c 1 "$img"
done
same_prefix info -f qcow2 plain.raw
same_prefix map -f qcow2 plain.raw
same_prefix check -f qcow2 plain.raw
same_prefix convert -f qcow2 -O raw plain.raw out.raw
same_as_qemu_err convert -n -O qcow2 plain.raw missing.qcow2

# A backing file name read from an image never selects a test node (the
# fault injector, the recorder): "blkdebug:RULES:FILE" and "record:LOG:FILE"
# there are plain file names.  base.raw exists, the literal names do not.
truncate -s 1M base.raw
for name in "blkdebug:event=any:base.raw" "record:log:base.raw"; do
    rm -f over.qcow2 log
    "$QEMU_IMG" create -q -f qcow2 -u -b "$name" -F raw over.qcow2 1M
    "$QIMG" map over.qcow2 >.out 2>&1
    rc=$?
    assert_eq "backing '$name' is a plain file name" \
        "1: qimg: Could not open 'over.qcow2': Could not open backing file: Could not open '$name': No such file or directory" \
        "$rc: $(cat .out)"
    assert_rc "no record log was written for backing '$name'" 1 test -e log
done
finish
