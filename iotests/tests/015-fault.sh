#!/bin/bash
# Fault injection (QEMU's iotest 026 idea): qimg io on
# "blkdebug:event=X,errno=N,nth=K[,once]:FILE" for each metadata step the
# qcow2 driver announces.  The failing command reports the errno's message
# ("write failed: No space left on device"), and afterwards qemu-img check
# finds no corruption (leaks are allowed), every sector written holds the
# old or the new data, and the image can be written again.
# make test: every step with EIO at its first request (sticky), and half
# of the steps in turn with EIO at the second request, the other half
# with a one-shot ENOSPC at the first (each kind on seven or eight of the
# fifteen steps): 30 cases, not 45; QIMG_LONG=1: every step with ten kinds.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3

# verify.py CASES: for each line "DESC<TAB>RAW<TAB>REF<TAB>WRITES" of the
# file CASES, WRITES "OFF:LEN:OLD:NEW ...": every sector of each
# [OFF, OFF+LEN) of RAW is all OLD or all NEW; everything else matches the
# reference image REF.  One python3 for every case (~40 ms of CPU a
# start): a "BAD DESC" line for each case that fails, its reasons after.
cat >verify.py <<'PY'
import mmap, sys

def load(path):  # mapped, not read: the holes of a sparse file cost nothing
    with open(path, "rb") as f:
        if f.seek(0, 2) == 0:
            return b""
        return memoryview(mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ))

def verify(raw, ref, ranges, say):
    bad = 0
    if len(raw) != len(ref):
        say("size %d, expected %d" % (len(raw), len(ref)))
        bad += 1
    # inside the writes: each sector all OLD or all NEW (sectors are looked
    # at one by one only where the range is not all OLD or all NEW)
    edges = []
    for off, n, old, new in ranges:
        a, b = off // 512 * 512, (off + n) // 512 * 512
        edges.append((a, b))
        if raw[a:b] in (bytes([old]) * (b - a), bytes([new]) * (b - a)):
            continue
        olds, news = bytes([old]) * 512, bytes([new]) * 512
        for s in range(a // 512, b // 512):
            sec = raw[s * 512:(s + 1) * 512]
            if sec != olds and sec != news:
                if bad < 3:
                    say("sector %d holds neither %d nor %d" % (s, old, new))
                bad += 1
    # outside: the bytes of the reference, compared span by span
    pos = 0
    for start, end in sorted(edges) + [(len(raw), len(raw))]:
        if start > pos and raw[pos:start] != ref[pos:start]:
            for s in range(pos // 512, start // 512):
                if raw[s * 512:(s + 1) * 512] != ref[s * 512:(s + 1) * 512]:
                    if bad < 6:
                        say("sector %d changed outside the writes" % s)
                    bad += 1
        pos = max(pos, end)
    return bad

failed = 0
with open(sys.argv[1]) as cases:
    for line in cases:
        desc, raw, ref, writes = line.rstrip("\n").split("\t")
        why = []
        ranges = [tuple(int(x) for x in r.split(":")) for r in writes.split()]
        if verify(load(raw), load(ref), ranges, why.append):
            print("BAD " + desc)
            print("\n".join(why))
            failed += 1
sys.exit(1 if failed else 0)
PY

# fault_case DESC RULE CREATE-OPTS SETUP-CMDS EXPECT IO-ARGS...
#   EXPECT: yes (a command fails with the errno's message), rc (the exit
#   code says so), no (the step may not be reached: any result)
#   SETUP-CMDS: a qemu-io command list run before (';'-separated)
#   IO-ARGS: qimg io arguments; their writes are described by WRITES
#   ("off:len:old:new ...") for the content check.
# The image each case starts from (CREATE-OPTS and SETUP-CMDS) and its raw
# reference are made once and copied (TEMPLATE); each case's raw image is
# kept and verified after the last case (verify.py above).
declare -A TEMPLATE
ncase=0
: >cases.txt
fault_case() {
    local desc=$1 rule=$2 copts=$3 setup=$4 rc expect_fail=$5 t
    shift 5
    # (make test: the second and third kinds on every other step, in turn)
    nstep=$((nstep + 1))
    [ -n "${QIMG_LONG:-}" ] || [ "$vi" = 0 ] || [ $(((nstep + vi) % 2)) = 0 ] || return 0
    t=${TEMPLATE["$copts/$setup"]:-}
    if [ -z "$t" ]; then
        t=t${#TEMPLATE[@]}
        # shellcheck disable=SC2086
        "$QEMU_IMG" create -q -f qcow2 $copts $t.qcow2 64M
        if [ -n "$setup" ]; then
            local args=() c
            IFS=';' read -ra parts <<<"$setup"
            for c in "${parts[@]}"; do args+=(-c "$c"); done
            "$QEMU_IO" "${args[@]}" $t.qcow2 >/dev/null
        fi
        "$QEMU_IMG" convert -O raw $t.qcow2 $t.raw
        TEMPLATE["$copts/$setup"]=$t
    fi
    cp $t.qcow2 img.qcow2

    "$QIMG" io "$@" "blkdebug:$rule:img.qcow2" >out.txt 2>err.txt
    rc=$?
    local errmsg out
    errmsg=${STRERROR[$errno]}
    _checks=$((_checks + 1))
    if [ "$expect_fail" = rc ]; then
        # a failed flush prints nothing (as in qemu-io), only the exit code
        if [ $rc = 0 ]; then
            _fail "$desc: expected a failure (exit 0)"
        fi
    elif [ "$expect_fail" = yes ]; then
        out=$(<out.txt)$'\n'$(<err.txt)
        if [ $rc = 0 ] || [[ "$out" != *"$errmsg"* ]]; then
            _fail "$desc: expected a failure with '$errmsg' (exit $rc)"
            head -n 10 <<<"$out"
        fi
    fi

    # No corruption, leaks allowed (and repaired: usable again below): the
    # check that repairs leaks exits 2 on a corruption as the one that
    # does not (an internal error: 1).
    "$QEMU_IMG" check -r leaks img.qcow2 >check.txt 2>&1
    rc=$?
    _checks=$((_checks + 1))
    if [ $rc != 0 ] && [ $rc != 3 ]; then
        _fail "$desc: qemu-img check exit code $rc"
        head -n 20 check.txt
        return 1
    fi
    ncase=$((ncase + 1))
    "$QEMU_IMG" convert -O raw img.qcow2 img$ncase.raw
    _checks=$((_checks + 1))
    printf '%s\t%s\t%s\t%s\n' "$desc" img$ncase.raw $t.raw "$WRITES" >>cases.txt
    # Usable again, and as clean as a copy that qemu-io writes to (a
    # refcount left past the end of the file by the failed request is
    # invisible to check until the file grows over it).
    cp img.qcow2 img-q.qcow2
    assert_rc "$desc: write after the fault" 0 "$QIMG" io -c 'write -P 0x99 2M 192k' \
        -c 'read -P 0x99 2M 192k' img.qcow2
    "$QEMU_IO" -c 'write -P 0x99 2M 192k' img-q.qcow2 >/dev/null 2>&1
    "$QEMU_IMG" check img-q.qcow2 >/dev/null 2>&1
    assert_rc "$desc: check after writing again" $? "$QEMU_IMG" check img.qcow2
}

# every event with EIO and ENOSPC, the first and a later request, sticky
# and once (make test: see the head; QIMG_LONG=1: every combination)
variants=("5 1 " "5 2 " "28 1 ,once")
if [ -n "${QIMG_LONG:-}" ]; then
    variants=("5 1 " "5 1 ,once" "5 2 " "5 2 ,once" "28 1 " "28 1 ,once" "28 2 " "28 2 ,once"
        "122 3 " "5 5 ,once")
fi
# the messages of the errnos used, once (os.strerror)
declare -A STRERROR
while read -r n msg; do
    STRERROR[$n]=$msg
done < <(python3 -c 'import os, sys
for n in sys.argv[1:]: print(n, os.strerror(int(n)))' 5 28 122)
vi=-1
for v in "${variants[@]}"; do
    vi=$((vi + 1)) nstep=0
    read -r errno nth once <<<"$v"
    o=",errno=$errno,nth=$nth$once"
    must=no mustrc=no
    [ $nth = 1 ] && must=yes mustrc=rc

    # data: a new cluster, and an allocated one
    WRITES="0:196608:0:1" fault_case "data_write$o" "event=data_write$o" "" "" $must \
        -c 'write -P 1 0 64k' -c 'write -P 1 64k 128k'
    WRITES="65536:65536:5:6" fault_case "data_write overwrite$o" "event=data_write$o" \
        "" "write -P 5 64k 64k" $must -c 'write -P 6 64k 64k'
    # copy-on-write from a backing-less image's zeros, and of old data
    WRITES="66048:1024:5:7 1114624:4096:0:8" fault_case "cow_write$o" "event=cow_write$o" \
        "" "write -P 5 0 128k;write -P 4 1M 64k" no \
        -c 'write -P 7 66048 1024' -c 'write -P 8 1114624 4096'
    # new L2 tables and the L1 entries that point at them
    for ev in l2_alloc l1_update; do
        WRITES="0:4096:0:1" fault_case "$ev$o" "event=$ev$o" \
            "" "" $must -c 'write -P 1 0 4k'
    done
    # L2 table and refcount block write-back (at the flush of each
    # write: qimg io writes through by default)
    for ev in l2_update refblock_update; do
        WRITES="0:8192:0:1 1048576:4096:0:2" fault_case "$ev$o" "event=$ev$o" \
            "" "" $must -c 'write -P 1 0 8k' -c 'write -P 2 1M 4k'
    done
    # new refcount blocks and a bigger refcount table: 512-byte
    # clusters, 16-bit refcounts (one block covers 128 KiB, the
    # first table 8 MiB)
    WRITES="0:1048576:0:3" fault_case "refblock_alloc$o" "event=refblock_alloc$o" \
        "-o cluster_size=512" "" $must -t writeback -c 'write -P 3 0 1M' -c flush
    WRITES="0:10485760:0:4" fault_case "reftable_grow$o" "event=reftable_grow$o" \
        "-o cluster_size=512" "" $must -t writeback -c 'write -P 4 0 10M' -c flush
    # the L1 table grows for the vmstate area
    # (vmstate writes are buffered: the error comes with the flush)
    WRITES="" fault_case "l1_grow$o" "event=l1_grow$o" "" "" $mustrc \
        -c 'write -b -P 5 0 64k' -c flush
    # the dirty bit of lazy refcounts
    WRITES="0:4096:0:6" fault_case "header_update$o" "event=header_update$o" \
        "-o lazy_refcounts=on" "" $must -c 'write -P 6 0 4k'
    # compressed clusters
    WRITES="131072:65536:0:7" fault_case "compressed_write$o" \
        "event=compressed_write$o" "" "" $must -c 'write -c -P 7 128k 64k'
    # freeing clusters
    WRITES="0:262144:9:0" fault_case "cluster_free$o" "event=cluster_free$o" "" \
        "write -P 9 0 256k" no -c 'discard 0 256k' -c flush
    # the flush itself
    WRITES="0:4096:0:1" fault_case "flush$o" "event=flush,op=flush$o" "" "" $mustrc \
        -t writeback -c 'write -P 1 0 4k' -c flush
    # any metadata write at all
    WRITES="0:1048576:0:2" fault_case "any$o" "event=any$o" "" "" $must \
        -c 'write -P 2 0 1M'
done

# the contents of every case: each sector written old or new, the rest as
# before
python3 verify.py cases.txt >verify.txt 2>&1
fail_bad_lines verify.txt $? verify.py contents

finish
