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
# other sequences repeat that); the
# whole matrix with QIMG_LONG=1 (this test was make test's heaviest, 94 s
# of CPU here).
. "$(dirname "$0")/../common.sh"
requires qimg qemu-img qemu-io

"$QEMU_IMG" create -q -f raw base.raw 1M
"$QEMU_IO" -f raw -c 'write -P 1 0 64k' base.raw >/dev/null
"$QEMU_IMG" create -q -f qcow2 base.qcow2 1M
"$QEMU_IO" -c 'write -P 1 0 64k' base.qcow2 >/dev/null # cluster 0 allocated

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

# rule FMT EVENT IOTYPE ONCE: FMT over a blkdebug node with one rule
rule() {
    local io=
    [ -z "$3" ] || io=", \"iotype\": \"$3\""
    echo "json:{\"driver\": \"$1\", \"file\": {\"driver\": \"blkdebug\"," \
        "\"image\": {\"driver\": \"file\", \"filename\": \"t.img\"}," \
        "\"inject-error\": [{\"event\": \"$2\", \"once\": $4$io}]}}"
}
# cmds SEQ: qemu-io's -c list for w (write), f (flush), r (read), z (zero
# write), d (discard), separated by ';'
cmds() {
    local c
    IFS=';' read -ra _seq <<<"$1"
    for c in "${_seq[@]}"; do
        case $c in
        w) printf '%s\n' -c 'write -P 7 0 512' ;;
        f) printf '%s\n' -c flush ;;
        r) printf '%s\n' -c 'read 0 512' ;;
        z) printf '%s\n' -c 'write -z 0 512' ;;
        d) printf '%s\n' -c 'discard 0 512' ;;
        esac
    done
}

# the case the lead saw (issue 29): ok/fail/ok under writethrough
IO_RAW=1 IO_IMAGE=t.img IO_FROM=base.raw same_as_qemu_io \
    "raw, flush_to_disk once, writethrough: write write write" \
    -c 'write 0 512' -c 'write 0 512' -c 'write 0 512' "$(rule raw flush_to_disk '' true)"
# the default mask has flushes: the flush fails and spends the rule
for io in '' flush write block-status; do
    IO_RAW=1 IO_IMAGE=t.img IO_FROM=base.raw same_as_qemu_io \
        "raw, flush_to_disk once iotype '$io', writeback: write flush write" \
        -t writeback -c 'write 0 512' -c flush -c 'write 0 512' \
        "$(rule raw flush_to_disk "$io" true)"
done

# the matrix over raw
for ev in flush_to_disk flush_to_os none; do
    for io in '' write flush read discard; do
        for once in true false; do
            for cache in writethrough writeback; do
                for seq in 'w;w;w' 'w;f;w;f;w' 'f;w;f' 'w;r;w' 'w;z;w' 'w;d;w'; do
                    [ "$cache/$seq" != 'writethrough/w;d;w' ] || continue
                    sampled "$io" "$seq" || continue
                    mapfile -t c < <(cmds "$seq")
                    IO_RAW=1 IO_IMAGE=t.img IO_FROM=base.raw same_as_qemu_io \
                        "raw $ev iotype '$io' once $once $cache $seq" -t $cache "${c[@]}" \
                        "$(rule raw $ev "$io" $once)"
                done
            done
        done
    done
done

# over qcow2 (its sticky errors aside: see above)
for ev in flush_to_disk flush_to_os none; do
    for io in '' write flush read; do
        for once in true false; do
            for cache in writethrough writeback; do
                [ "$once/$cache" != true/writethrough ] || continue
                for seq in 'w;w;w' 'w;f;w;f;w' 'f;w;f' 'w;r;w' 'w;z;w'; do
                    [ "$cache/$seq" != 'writeback/w;f;w;f;w' ] || continue
                    [ "$cache/$seq" != 'writethrough/w;z;w' ] || continue
                    sampled "$io" "$seq" || continue
                    mapfile -t c < <(cmds "$seq")
                    IO_IMAGE=t.img IO_FROM=base.qcow2 same_as_qemu_io \
                        "qcow2 $ev iotype '$io' once $once $cache $seq" -t $cache "${c[@]}" \
                        "$(rule qcow2 $ev "$io" $once)"
                done
            done
        done
    done
done

# a config file, probed raw (blkdebug:CONF:FILE) and qcow2
for ev in flush_to_disk flush_to_os; do
    for io in '' flush write; do
        {
            printf '[inject-error]\nevent = "%s"\nonce = "on"\n' $ev
            [ -z "$io" ] || printf 'iotype = "%s"\n' $io
        } >rule.conf
        for cache in writethrough writeback; do
            IO_RAW=1 IO_IMAGE=t.img IO_FROM=base.raw same_as_qemu_io \
                "config $ev iotype '$io' $cache, raw" -t $cache -c 'write 0 512' \
                -c 'write 0 512' -c flush -c 'write 0 512' "blkdebug:rule.conf:t.img"
            IO_IMAGE=t.img IO_FROM=base.qcow2 same_as_qemu_io \
                "config $ev iotype '$io' $cache, qcow2" -t $cache -f qcow2 \
                -c 'write 0 512' -c 'read 0 512' "blkdebug:rule.conf:t.img"
        done
    done
done
printf '[inject-error]\nevent = "none"\n' >none.conf
IO_IMAGE=t.img IO_FROM=base.qcow2 same_as_qemu_io "config none, qcow2" -f qcow2 \
    -c 'read 0 512' "blkdebug:none.conf:t.img"
IO_RAW=1 IO_IMAGE=t.img IO_FROM=base.raw same_as_qemu_io "config none, probed" \
    -c 'read 0 512' "blkdebug:none.conf:t.img"

# --image-opts
for ev in flush_to_disk flush_to_os none; do
    for io in '' flush; do
        o="driver=raw,file.driver=blkdebug,file.image.driver=file"
        o+=",file.image.filename=t.img,file.inject-error.0.event=$ev"
        o+=",file.inject-error.0.once=on"
        [ -z "$io" ] || o+=",file.inject-error.0.iotype=$io"
        for cache in writethrough writeback; do
            IO_RAW=1 IO_IMAGE=t.img IO_FROM=base.raw same_as_qemu_io \
                "image-opts $ev iotype '$io' $cache" --image-opts -t $cache \
                -c 'write 0 512' -c 'write 0 512' -c flush -c 'write 0 512' "$o"
        done
    done
done

# the close and the close command: the exit status is the commands'
IO_RAW=1 IO_IMAGE=t.img IO_FROM=base.raw same_as_qemu_io "raw, failed close" \
    -t writeback -c 'write 0 512' "$(rule raw none flush false)"
IO_RAW=1 IO_IMAGE=t.img IO_FROM=base.raw same_as_qemu_io "raw, failed close command" \
    -t writeback -c 'write 0 512' -c close "$(rule raw none flush false)"
IO_IMAGE=t.img IO_FROM=base.qcow2 same_as_qemu_io "qcow2, failed close" \
    -t writeback -c 'write 0 512' "$(rule qcow2 none flush false)"
IO_IMAGE=t.img IO_FROM=base.qcow2 same_as_qemu_io "qcow2, failed close command" \
    -t writeback -c 'write 0 512' -c close "$(rule qcow2 none flush false)"

finish
