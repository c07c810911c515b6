#!/bin/bash
# 201-blkdebug-flush-events: QEMU's blkdebug rules on the flush events and
# on event "none", with and without iotype, under writethrough and
# writeback, against qemu-io 7.2 (issue 29):
#  - a rule without iotype fails reads, writes, zero writes, discards and
#    flushes (QEMU's add_rule default; block-status alone is spared):
#    "write; flush" under a once rule fails the flush and spends the rule,
#    as iotype=flush does (block/faulty-config.c fact 6);
#  - flush_to_os is raised by every flush of the format above the node,
#    flush_to_disk only when that format has writes its last good flush
#    did not cover, and a writethrough write's own flush does not cover it
#    yet (QEMU's emulated FUA): raw over blkdebug with a once rule on
#    flush_to_disk runs "write; write; write" as ok/fail/ok
#    (faulty-config.c fact 8, block.h invariant 7, faulty.c invariant 12);
#  - event "none" rules are armed by the open and fail with the errno
#    alone: a qcow2's header read says QEMU's "Could not read qcow2 header:
#    Input/output error" (faulty-config.c fact 4, faulty.c invariant 7);
#  - qemu-io's close never fails: a failed final flush of a raw image is
#    silent and leaves the exit status alone, a qcow2's prints only its
#    cache lines (tools/io-open.c fact 7).
# The rules come as json: inject-error lists, config files and
# --image-opts options.  qcow2 runs skip what its sticky errors change
# (qcow2/meta.c invariant 9: after a failed flush later writes fail where
# QEMU's go on): once rules under writethrough, writes after a failed
# flush command, a zero write whose own flush failed.  Discards run under
# writeback only: qimg flushes after a writethrough discard
# (api/image.c invariant 2), QEMU does not.
# make test runs every sequence for the rules without iotype and with
# iotype flush (the flush events' own behaviour), and for an iotype of
# write, read or discard a sample (sampled: the sequences with that
# request and one of flushes; the rule fires on its iotype alone, and the
# other sequences repeat that); and each of those (event, iotype, cache
# mode, sequence) for one value of once where both are run (once_due:
# true where the sum of the four's indices is even, false where odd:
# changing any one of them flips the value, so every once value still meets
# every sequence, cache mode, event and iotype, and every pair of the
# four); qcow2 under writethrough runs once false only (see above), so
# all of those run.  The whole matrix with QIMG_LONG=1 (this test was make
# test's heaviest, 94 s of CPU here; 365 cases, 224 now).
# Each case is io_case (below), not common.sh's same_as_qemu_io: the same
# checks in 4 processes a raw case, 5 a qcow2 one, instead of 10 to 13 (a
# process costs 12-30 ms of CPU here): qemu-io and qimg io each in a folder
# of its own (q/, m/) on a copy of the base that one tee makes for both,
# the outputs filtered by the shell's builtins, a raw image compared byte
# for byte by cmp (qemu-img compare of two raw files compares the same
# bytes), and no `timeout` wrappers (a hang fails the test by the runner's
# timeout instead): 68 s of CPU down to 40 s here (stop 54, a loaded
# machine).  A raw case's base is 4 KiB of 0x01 (the commands touch its
# first 512 bytes) that the shell writes into both folders, its images
# compared by common.sh's same_bytes (the shell's read; cmp where a zero
# write left a NUL byte); the rule's json and the command lists are made
# without subshells: 3 processes a raw case (stop 55).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io cmp

# the raw base: 4 KiB of 0x01, no NUL byte (same_bytes reads it)
printf -v RAW_BASE '%4096s' ''
RAW_BASE=${RAW_BASE// /$'\x01'}
"$QEMU_IMG" create -q -f qcow2 base.qcow2 1M
"$QEMU_IO" -c 'write -P 1 0 64k' base.qcow2 >/dev/null # cluster 0 allocated
mkdir q m

# filtered VAR FILE: VAR = FILE's text through io_filter (common.sh), by the
# shell's builtins (no sed), trailing newlines dropped as $(...) would
filtered() {
    local _all _line _out='' _re
    _re='[0-9]* ops; [0-9/:. sec]* \([0-9/.inf]* [EPTGMKiBbytes]*/sec and [0-9/.inf]* ops/sec\)'
    IFS= read -r -d '' _all <"$2"
    while [ -n "$_all" ]; do
        _line=${_all%%$'\n'*}
        if [ "$_line" = "$_all" ]; then _all=''; else _all=${_all#*$'\n'}; fi
        [[ $_line =~ $_re ]] && _line=${_line/"${BASH_REMATCH[0]}"/X ops; TIME}
        case $_line in qemu-io:\ * | qemu-img:\ *) _line="qimg: ${_line#*: }" ;; esac
        _out+=$_line$'\n'
    done
    while [ "${_out%$'\n'}" != "$_out" ]; do _out=${_out%$'\n'}; done
    printf -v "$1" '%s' "$_out"
}

# io_case DESC ARGS...: same_as_qemu_io's checks (common.sh) with the
# image t.img: qemu-io ARGS in q/, qimg io ARGS in m/, each on a fresh copy
# of the base at t.img (IO_RAW set: RAW_BASE, else IO_FROM); the same exit
# code, stdout and stderr (io_filter), the same guest data, and (IO_RAW
# unset: qcow2) the image qimg left checks clean.  A config file a case
# names is written to both folders (conf).
io_case() {
    local desc=$1 qrc mrc a b
    shift
    if [ -n "${IO_RAW:-}" ]; then
        printf '%s' "$RAW_BASE" >q/t.img && printf '%s' "$RAW_BASE" >m/t.img || exit 1
    else
        tee q/t.img m/t.img <"$IO_FROM" >/dev/null || exit 1
    fi
    cd q && "$QEMU_IO" "$@" >../q.out 2>../q.err
    qrc=$?
    cd ../m && "$QIMG" io "$@" >../m.out 2>../m.err
    mrc=$?
    cd ..
    assert_eq "$desc: exit code" "$qrc" "$mrc"
    filtered a q.out && filtered b m.out && assert_eq "$desc: stdout" "$a" "$b"
    filtered a q.err && filtered b m.err && assert_eq "$desc: stderr" "$a" "$b"
    if [ -n "${IO_RAW:-}" ]; then
        _checks=$((_checks + 1))
        same_bytes q/t.img m/t.img || _fail "$desc: contents differ"
    else
        assert_rc "$desc: contents" 0 "$QEMU_IMG" compare -q q/t.img m/t.img
        assert_rc "$desc: check" 0 "$QEMU_IMG" check -q m/t.img
    fi
}

# conf NAME TEXT: the config file NAME in both folders
conf() {
    printf '%s' "$2" >"q/$1"
    printf '%s' "$2" >"m/$1"
}

# sampled IOTYPE SEQ: whether make test runs SEQ for a rule of IOTYPE
# (the header says which; QIMG_LONG=1: all)
sampled() {
    [ -n "${QIMG_LONG:-}" ] && return 0
    case "$1/$2" in
    /* | flush/*) return 0 ;;
    write/w\;w\;w | write/w\;z\;w | write/f\;w\;f) return 0 ;;
    read/w\;r\;w | read/w\;f\;w\;f\;w) return 0 ;;
    discard/w\;d\;w | discard/w\;f\;w\;f\;w) return 0 ;;
    esac
    return 1
}

# once_due ONCE N: whether make test runs the rule's ONCE value for the
# matrix case whose (event, iotype, cache mode, sequence) indices sum to N
# (the header says why; QIMG_LONG=1: both)
once_due() {
    [ -n "${QIMG_LONG:-}" ] && return 0
    case $1/$(($2 % 2)) in true/0 | false/1) return 0 ;; esac
    return 1
}

# rule FMT EVENT IOTYPE ONCE: RULE = FMT over a blkdebug node with one rule
rule() {
    local io=
    [ -z "$3" ] || io=", \"iotype\": \"$3\""
    RULE="json:{\"driver\": \"$1\", \"file\": {\"driver\": \"blkdebug\","
    RULE+=" \"image\": {\"driver\": \"file\", \"filename\": \"t.img\"},"
    RULE+=" \"inject-error\": [{\"event\": \"$2\", \"once\": $4$io}]}}"
}
# cmds SEQ: C = qemu-io's -c list for w (write), f (flush), r (read), z
# (zero write), d (discard), separated by ';'
cmds() {
    local x
    C=()
    IFS=';' read -ra _seq <<<"$1"
    for x in "${_seq[@]}"; do
        case $x in
        w) C+=(-c 'write -P 7 0 512') ;;
        f) C+=(-c flush) ;;
        r) C+=(-c 'read 0 512') ;;
        z) C+=(-c 'write -z 0 512') ;;
        d) C+=(-c 'discard 0 512') ;;
        esac
    done
}

# the case the lead saw (issue 29): ok/fail/ok under writethrough
rule raw flush_to_disk '' true
IO_RAW=1 io_case "raw, flush_to_disk once, writethrough: write write write" \
    -c 'write 0 512' -c 'write 0 512' -c 'write 0 512' "$RULE"
# the default mask has flushes: the flush fails and spends the rule
for io in '' flush write block-status; do
    rule raw flush_to_disk "$io" true
    IO_RAW=1 io_case "raw, flush_to_disk once iotype '$io', writeback: write flush write" \
        -t writeback -c 'write 0 512' -c flush -c 'write 0 512' "$RULE"
done

# the matrix over raw (e, i, k, s: the indices once_due sums)
e=0
for ev in flush_to_disk flush_to_os none; do
    i=0
    for io in '' flush write read discard; do
        for once in true false; do
            k=0
            for cache in writethrough writeback; do
                s=0
                for seq in 'w;w;w' 'w;f;w;f;w' 'f;w;f' 'w;r;w' 'w;z;w' 'w;d;w'; do
                    s=$((s + 1))
                    [ "$cache/$seq" != 'writethrough/w;d;w' ] || continue
                    sampled "$io" "$seq" || continue
                    once_due $once $((e + i + k + s)) || continue
                    cmds "$seq"
                    rule raw $ev "$io" $once
                    IO_RAW=1 io_case "raw $ev iotype '$io' once $once $cache $seq" \
                        -t $cache "${C[@]}" "$RULE"
                done
                k=$((k + 1))
            done
        done
        i=$((i + 1))
    done
    e=$((e + 1))
done

# over qcow2 (its sticky errors aside: see above)
e=0
for ev in flush_to_disk flush_to_os none; do
    i=0
    for io in '' flush write read; do
        for once in true false; do
            k=0
            for cache in writethrough writeback; do
                [ "$once/$cache" != true/writethrough ] || { k=1 && continue; }
                s=0
                for seq in 'w;w;w' 'w;f;w;f;w' 'f;w;f' 'w;r;w' 'w;z;w'; do
                    s=$((s + 1))
                    [ "$cache/$seq" != 'writeback/w;f;w;f;w' ] || continue
                    [ "$cache/$seq" != 'writethrough/w;z;w' ] || continue
                    sampled "$io" "$seq" || continue
                    # (writethrough: once false alone is run, every time)
                    [ $cache = writethrough ] || once_due $once $((e + i + k + s)) || continue
                    cmds "$seq"
                    rule qcow2 $ev "$io" $once
                    IO_FROM=base.qcow2 io_case "qcow2 $ev iotype '$io' once $once $cache $seq" \
                        -t $cache "${C[@]}" "$RULE"
                done
                k=$((k + 1))
            done
        done
        i=$((i + 1))
    done
    e=$((e + 1))
done

# a config file, probed raw (blkdebug:CONF:FILE) and qcow2
for ev in flush_to_disk flush_to_os; do
    for io in '' flush write; do
        printf -v c '[inject-error]\nevent = "%s"\nonce = "on"\n' $ev
        [ -z "$io" ] || c+="iotype = \"$io\""$'\n'
        conf rule.conf "$c"
        for cache in writethrough writeback; do
            IO_RAW=1 io_case \
                "config $ev iotype '$io' $cache, raw" -t $cache -c 'write 0 512' \
                -c 'write 0 512' -c flush -c 'write 0 512' "blkdebug:rule.conf:t.img"
            IO_FROM=base.qcow2 io_case \
                "config $ev iotype '$io' $cache, qcow2" -t $cache -f qcow2 \
                -c 'write 0 512' -c 'read 0 512' "blkdebug:rule.conf:t.img"
        done
    done
done
conf none.conf $'[inject-error]\nevent = "none"\n'
IO_FROM=base.qcow2 io_case "config none, qcow2" -f qcow2 \
    -c 'read 0 512' "blkdebug:none.conf:t.img"
IO_RAW=1 io_case "config none, probed" \
    -c 'read 0 512' "blkdebug:none.conf:t.img"

# --image-opts
for ev in flush_to_disk flush_to_os none; do
    for io in '' flush; do
        o="driver=raw,file.driver=blkdebug,file.image.driver=file"
        o+=",file.image.filename=t.img,file.inject-error.0.event=$ev"
        o+=",file.inject-error.0.once=on"
        [ -z "$io" ] || o+=",file.inject-error.0.iotype=$io"
        for cache in writethrough writeback; do
            IO_RAW=1 io_case \
                "image-opts $ev iotype '$io' $cache" --image-opts -t $cache \
                -c 'write 0 512' -c 'write 0 512' -c flush -c 'write 0 512' "$o"
        done
    done
done

# the close and the close command: the exit status is the commands'
rule raw none flush false
IO_RAW=1 io_case "raw, failed close" -t writeback -c 'write 0 512' "$RULE"
IO_RAW=1 io_case "raw, failed close command" -t writeback -c 'write 0 512' -c close "$RULE"
rule qcow2 none flush false
IO_FROM=base.qcow2 io_case "qcow2, failed close" -t writeback -c 'write 0 512' "$RULE"
IO_FROM=base.qcow2 io_case "qcow2, failed close command" \
    -t writeback -c 'write 0 512' -c close "$RULE"

finish
