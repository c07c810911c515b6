#!/bin/bash
# qcow2's l2-cache-entry-size (issue 29, QEMU 103 and 137): the L2 cache
# holds slices of that many bytes (qcow2/cluster.c invariant 6), compared
# with qemu-io 7.2 on the same input:
#  - the option in open -o, reopen -o, --image-opts and json:, every
#    power of two from 512 to the cluster size, with 4k and 64k clusters
#    and extended L2 entries: the same output as qemu-io, the same guest
#    data afterwards, qemu-img check clean; invalid sizes (not a power of
#    two, below 512, above the cluster size) with QEMU's message (make
#    test: reopen -o with one size per cluster size, see below);
#  - on the recording node: a write-back of a modified slice writes that
#    slice only (its bytes, at its offset in the table), while a new L2
#    table is written whole before the L1 entry points at it.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3

# ---- the option, each way in, against qemu-io ----
# Each tool runs all the sequences of one cluster size in two processes
# (one with --image-opts, whose open commands take options as that
# command line does), each sequence on its own copy of base.qcow2 opened
# and closed by the open and close commands: qemu-io's copies in q/,
# qimg's in m/ (the same names in both outputs).  A process start costs
# more CPU than a sequence's work; one process per sequence took twice
# this test's CPU.
# run_both_io NAME ARGS...: qemu-io ARGS in q/ and qimg io ARGS in m/: the
# same exit code, stdout and stderr (io_filter).
run_both_io() {
    local desc=$1 qrc mrc
    shift
    (cd q && exec "$QEMU_IO" "$@") >q.out 2>q.err
    qrc=$?
    (cd m && exec "$QIMG" io "$@") >m.out 2>m.err
    mrc=$?
    assert_eq "$desc: exit code" "$qrc" "$mrc"
    assert_same_filtered "$desc: stdout" io_filter q.out m.out
    assert_same_filtered "$desc: stderr" io_filter q.err m.err
}
for create in cluster_size=4k cluster_size=64k cluster_size=64k,extended_l2=on \
    cluster_size=16k,extended_l2=on; do
    cs=$(numfmt --from=iec "$(sed 's/cluster_size=\([0-9]*k\).*/\1/;s/k/K/' <<<"$create")")
    "$QEMU_IMG" create -q -f qcow2 -o "$create" base.qcow2 64M
    "$QEMU_IO" -c 'write -P 0x21 0 3M' -c 'write -P 0x22 40M 1M' base.qcow2 >/dev/null
    rm -rf q m
    mkdir q m
    plain=()
    iopts=()
    imgs=()
    reopen_e=$cs
    case $create in cluster_size=4k | cluster_size=64k,extended_l2=on) reopen_e=512 ;; esac
    for e in $(printf '%s\n' 512 $((cs / 8)) "$cs" | sort -nu); do
        small="l2-cache-entry-size=$e,l2-cache-size=$((2 * e))"
        # open -o
        plain+=(-c "open -o $small o$e.qcow2" -c 'read -P 0x21 0 3M' \
            -c 'write -P 0x31 1M 200k' -c 'write -z 2M 300k' -c 'discard 2560k 128k' \
            -c 'write -P 0x32 33M 70k' -c 'read -P 0x22 40M 1M' -c 'read -P 0x32 33M 70k' \
            -c 'read -P 0x31 1M 200k' -c 'read -P 0 2M 300k' -c 'map' -c close)
        # reopen -o: its whole-disk zero write and read are most of this
        # test's CPU: make test runs it with one size per cluster size,
        # 512 (a change of the slice size at the first reopen, none at the
        # second) or the cluster size (none at the first, a change back to
        # 512 at the second) in turn; QIMG_LONG=1 with every size
        if [ -n "${QIMG_LONG:-}" ] || [ "$e" = "$reopen_e" ]; then
            plain+=(-c "open r$e.qcow2" -c "reopen -o $small" -c 'write -P 0x41 100k 5M' \
                -c 'reopen -o l2-cache-entry-size=512' -c 'read -P 0x41 100k 5M' \
                -c 'write -z -u 0 64M' -c 'read -P 0 0 64M' -c close)
            imgs+=("reopen -o $e:r$e")
        fi
        # json:
        plain+=(-c "open json:{\"driver\":\"qcow2\",\"file\":{\"driver\":\"file\",\"filename\":\"j$e.qcow2\"},\"l2-cache-entry-size\":$e,\"l2-cache-size\":$((2 * e))}" \
            -c 'write -P 0x61 10M 9M' -c 'read -P 0x61 10M 9M' -c close)
        # --image-opts
        iopts+=(-c "open driver=qcow2,file.filename=i$e.qcow2,$small" \
            -c 'write -P 0x51 63M 1M' -c 'read -P 0x21 0 3M' -c 'read -P 0x51 63M 1M' -c close)
        imgs+=("open -o $e:o$e" "json $e:j$e" "image-opts $e:i$e")
    done
    # the invalid sizes (a failed open leaves no file open: its read
    # says so, and the next open is no second open)
    for bad in 256 1000 $((cs + 512)) $((2 * cs)) 33k; do
        plain+=(-c "open -o l2-cache-entry-size=$bad t.qcow2" -c 'read -P 0x21 0 3M')
    done
    plain+=(-c "open t.qcow2" -c "reopen -o l2-cache-entry-size=1000" -c 'read -P 0x21 0 3M' \
        -c close)
    iopts+=(-c "open driver=qcow2,file.filename=t.qcow2,l2-cache-entry-size=$((2 * cs))" \
        -c 'read -P 0x21 0 3M')
    for i in "${imgs[@]}" ":t"; do
        cp base.qcow2 "q/${i#*:}.qcow2"
        cp base.qcow2 "m/${i#*:}.qcow2"
    done
    run_both_io "$create" "${plain[@]}"
    run_both_io "$create image-opts" --image-opts "${iopts[@]}"
    for i in "${imgs[@]}"; do
        f=${i#*:}.qcow2
        assert_rc "$create ${i%:*}: contents" 0 "$QEMU_IMG" compare "q/$f" "m/$f"
        assert_rc "$create ${i%:*}: check" 0 "$QEMU_IMG" check "m/$f"
    done
done

# ---- what reaches the file: slices written alone, new tables whole ----
# l2_writes LOG IMG: the writes into the L2 table of L1 entry 0, as
# "OFFSET-IN-TABLE+LENGTH" lines, in log order (block/record.c format),
# repeats of the same write in a row once (the write path may write a slice
# back more than once before a flush, as it does whole tables).
l2_writes() {
    python3 - "$1" "$2" <<'PY' | uniq
import struct, sys
log, img = sys.argv[1], sys.argv[2]
with open(img, "rb") as f:
    h = f.read(104)
    cs = 1 << struct.unpack_from(">I", h, 20)[0]
    l1 = struct.unpack_from(">Q", h, 40)[0]
    f.seek(l1)
    l2 = struct.unpack(">Q", f.read(8))[0] & 0x00fffffffffffe00
data = open(log, "rb").read()
pos = 16
while pos < len(data):
    typ, fid, off, ln, aux = struct.unpack_from("<IIQQQ", data, pos)
    pos += 32
    if typ in (1, 6):
        pos += ln
    if typ == 1 and off < l2 + cs and off + ln > l2:
        print("%d+%d" % (off - l2, ln))
PY
}
"$QEMU_IMG" create -q -f qcow2 r.qcow2 64M
: >r.log
"$QIMG" io --image-opts -c 'write -P 0x71 0 64k' -c flush -c 'write -P 0x72 20M 64k' -c flush \
    -c 'write -P 0x73 0 64k' -c flush \
    "driver=qcow2,file.filename=record:r.log:r.qcow2,l2-cache-entry-size=4k" >/dev/null
# 20M is entry 320, slice 0 (512 entries of 4k); 0 rewritten in place: no
# L2 write.  The table: whole, then slice 0.
assert_eq "new table whole, then slice 0" "0+65536
0+4096" "$(l2_writes r.log r.qcow2)"
: >r.log
"$QIMG" io --image-opts -c 'write -P 0x74 40M 64k' -c 'write -P 0x75 60M 64k' -c flush \
    "driver=qcow2,file.filename=record:r.log:r.qcow2,l2-cache-entry-size=4k" >/dev/null
# 40M: entry 640, slice 1 (at 4096); 60M: entry 960, slice 1 too
assert_eq "slice 1 only" "4096+4096" "$(l2_writes r.log r.qcow2)"
: >r.log
"$QIMG" io --image-opts -c 'write -P 0x76 63M 64k' -c flush \
    "driver=qcow2,file.filename=record:r.log:r.qcow2,l2-cache-entry-size=512" >/dev/null
# 63M: entry 1008, slice 15 of 64 entries (at 7680)
assert_eq "a 512-byte slice" "7680+512" "$(l2_writes r.log r.qcow2)"
assert_rc "recorded image: check" 0 "$QEMU_IMG" check r.qcow2
assert_eq "recorded image: data" "" "$("$QEMU_IO" -c 'read -P 0x73 0 64k' -c 'read -P 0x72 20M 64k' \
    -c 'read -P 0x74 40M 64k' -c 'read -P 0x75 60M 64k' -c 'read -P 0x76 63M 64k' \
    -c 'read -P 0 64k 19M' r.qcow2 | grep -i pattern)"
finish
