#!/bin/bash
# Persistent dirty bitmaps maintained (qcow2/bitmap-store.c, dirty.c):
#  - a random workload of writes, zero writes, discards and rewrites (the
#    lock-free path, aio_write in flight) run by qimg io and by qemu-io on
#    copies of one image leaves every enabled bitmap with the bits QEMU's
#    has (qemu-nbd -B, nbdinfo --map), at granularities 512 B .. 2 MiB and
#    cluster sizes 4k .. 2M, consistent (not in use) after close, qemu-img
#    check clean; a second session adds to the bits of the first;
#  - a disabled bitmap is left byte for byte; one already in use (QEMU
#    killed) stays in use while the others are maintained; the vmstate
#    area sets no bits; reverting to a snapshot makes every bit dirty
#    (QEMU's would stay clean: qimg does not trust them);
#  - convert --bitmaps copies the bitmaps as qemu-img convert --bitmaps
#    does (names, granularity, enabled, bits), refuses an inconsistent one
#    with qemu-img's message unless --skip-broken-bitmaps;
#  - power loss while a session stores its bits (the crash-state
#    explorer): no state is corrupt, and a bitmap not marked in use always
#    holds the session's writes (crash.py --bitmap-check).
. "${0%/*}/../common.sh"
. "$IOTESTS_DIR/crash/lib.sh"
requires qimg qemu-img qemu-io qemu-nbd nbdinfo python3

flags() { # IMG: "NAME FLAGS..." per bitmap
    "$QEMU_IMG" info --output=json "$1" | python3 -c '
import json, sys
for b in json.load(sys.stdin)["format-specific"]["data"].get("bitmaps", []):
    print(b["name"], b["granularity"], " ".join(b["flags"]))'
}

# workload SEED SIZE: qemu-io commands (one per line), qemu-io's syntax
workload() {
    python3 - "$1" "$2" <<'PY'
import random, sys
rng = random.Random(sys.argv[1])
size = int(sys.argv[2])
for i in range(40):
    kind = rng.choice(["write", "write", "zero", "discard", "rewrite"])
    off = rng.randrange(0, size - 1) // 512 * 512
    ln = min(rng.choice([512, 4096, 65536, 300000, 2 << 20]), size - off)
    ln = max(512, ln // 512 * 512)
    if kind == "write":
        print("write -P %d %d %d" % (i % 250 + 1, off, ln))
    elif kind == "zero":
        print("write -z %d %d" % (off, ln))
    elif kind == "discard":
        print("discard %d %d" % (off, ln))
    else:  # written twice: the second time in place
        print("write -P 7 %d %d" % (off, ln))
        print("write -P 8 %d %d" % (off, ln))
PY
}

run_session() { # IMG CMDFILE TOOL...
    local img=$1 file=$2 args=()
    shift 2
    while read -r line; do args+=(-c "$line"); done <"$file"
    "$@" "${args[@]}" "$img" >/dev/null 2>&1
}

compare_bitmaps() { # LABEL NAMES...
    local label=$1 b
    shift
    for b in "$@"; do
        assert_eq "$label: bitmap $b as QEMU's" "$(dirty_map q.qcow2 "$b")" \
            "$(dirty_map m.qcow2 "$b")"
    done
    assert_eq "$label: flags as QEMU's" "$(flags q.qcow2)" "$(flags m.qcow2)"
    assert_rc "$label: check" 0 "$QEMU_IMG" check -q m.qcow2
}

size=$((24 << 20))
for cfg in "4096 512 64k" "65536 64k 1M" "2M 4k 2M"; do
    # shellcheck disable=SC2086
    set -- $cfg
    cs=$1
    "$QEMU_IMG" create -q -f qcow2 -o cluster_size="$cs" base.qcow2 $size
    "$QEMU_IMG" bitmap --add -g "$2" base.qcow2 fine
    "$QEMU_IMG" bitmap --add -g "$3" base.qcow2 coarse
    "$QEMU_IMG" bitmap --add base.qcow2 off
    "$QEMU_IO" -c 'write -P 3 1M 1M' base.qcow2 >/dev/null # bits in "off"
    "$QEMU_IMG" bitmap --disable base.qcow2 off
    cp base.qcow2 q.qcow2
    cp base.qcow2 m.qcow2
    workload "s1-$cs" $size >w1
    run_session q.qcow2 w1 "$QEMU_IO"
    run_session m.qcow2 w1 "$QIMG" io
    compare_bitmaps "cluster $cs, session 1" fine coarse off
    workload "s2-$cs" $size >w2
    run_session q.qcow2 w2 "$QEMU_IO"
    run_session m.qcow2 w2 "$QIMG" io
    compare_bitmaps "cluster $cs, session 2" fine coarse off
    assert_rc "cluster $cs: same contents" 0 "$QEMU_IMG" compare -q q.qcow2 m.qcow2
done

# in-place rewrites through the lock-free path, eight aio_writes in flight
"$QEMU_IMG" create -q -f qcow2 base.qcow2 $size
"$QEMU_IO" -c 'write -P 1 0 24M' base.qcow2 >/dev/null
"$QEMU_IMG" bitmap --add base.qcow2 b
cp base.qcow2 q.qcow2
cp base.qcow2 m.qcow2
cmds=()
for i in 0 3 5 9 12 17 20 23; do cmds+=(-c "aio_write -P 9 $((i << 20)) 4k"); done
cmds+=(-c aio_flush)
"$QIMG" io "${cmds[@]}" m.qcow2 >/dev/null
"$QEMU_IO" "${cmds[@]}" q.qcow2 >/dev/null
compare_bitmaps "aio rewrites" b

# a disabled bitmap stays byte for byte; one in use stays in use
"$QEMU_IMG" create -q -f qcow2 k.qcow2 $size
"$QEMU_IMG" bitmap --add k.qcow2 killed
( "$QEMU_IO" -c 'write 0 64k' -c 'sigraise 9' k.qcow2 >/dev/null 2>&1 )
"$QEMU_IMG" bitmap --add k.qcow2 kept
"$QEMU_IMG" bitmap --add k.qcow2 frozen
"$QEMU_IO" -c 'write 7M 64k' k.qcow2 >/dev/null
"$QEMU_IMG" bitmap --disable k.qcow2 frozen
frozen=$(dirty_map k.qcow2 frozen)
"$QIMG" io -c 'write 5M 64k' k.qcow2 >/dev/null
assert_eq "in use stays in use" "killed 65536 in-use auto
kept 65536 auto
frozen 65536 " "$(flags k.qcow2)"
assert_eq "the others are maintained" \
    "$(printf '%10s %11s %4s  dirty\n%10s %11s %4s  dirty' 5242880 65536 1 7340032 65536 1)" \
    "$(dirty_map k.qcow2 kept)"
assert_eq "disabled: unchanged" "$frozen" "$(dirty_map k.qcow2 frozen)"
assert_rc "in use: check" 0 "$QEMU_IMG" check -q k.qcow2

# the vmstate area sets nothing; a revert sets everything
"$QEMU_IMG" create -q -f qcow2 v.qcow2 $size
"$QEMU_IMG" bitmap --add v.qcow2 b
"$QIMG" io -c 'write -b -P 5 0 1M' v.qcow2 >/dev/null
assert_eq "vmstate writes set no bits" "" "$(dirty_map v.qcow2 b)"
"$QIMG" snapshot -c s v.qcow2
assert_eq "snapshot -c sets no bits" "" "$(dirty_map v.qcow2 b)"
"$QIMG" snapshot -a s v.qcow2
assert_eq "snapshot -a: every bit" "$(printf '%10s %11s %4s  dirty' 0 $size 1)" \
    "$(dirty_map v.qcow2 b)"
assert_rc "snapshot -a: check" 0 "$QEMU_IMG" check -q v.qcow2

# convert --bitmaps
"$QEMU_IMG" create -q -f qcow2 cs.qcow2 $size
"$QEMU_IMG" bitmap --add cs.qcow2 a
"$QEMU_IMG" bitmap --add -g 1M cs.qcow2 big
"$QEMU_IO" -c 'write -P 4 3M 100k' -c 'write 20M 64k' cs.qcow2 >/dev/null
"$QEMU_IMG" bitmap --add --disable cs.qcow2 later
"$QEMU_IMG" bitmap --enable cs.qcow2 later
"$QEMU_IMG" bitmap --disable cs.qcow2 big
for extra in "" "-o cluster_size=4k"; do
    rm -f q.qcow2 m.qcow2
    # shellcheck disable=SC2086
    "$QEMU_IMG" convert --bitmaps -O qcow2 $extra cs.qcow2 q.qcow2
    # shellcheck disable=SC2086
    "$QIMG" convert --bitmaps -O qcow2 $extra cs.qcow2 m.qcow2
    compare_bitmaps "convert --bitmaps $extra" a big later
done
cp cs.qcow2 cb.qcow2
( "$QEMU_IO" -c 'write 0 64k' -c 'sigraise 9' cb.qcow2 >/dev/null 2>&1 )
for opts in "--bitmaps -O qcow2" "--bitmaps --skip-broken-bitmaps -O qcow2" \
    "--bitmaps -O raw" "--skip-broken-bitmaps -O qcow2"; do
    rm -f q.qcow2 m.qcow2
    # shellcheck disable=SC2086
    "$QEMU_IMG" convert $opts cb.qcow2 q.qcow2 >q.err 2>&1
    qrc=$?
    # shellcheck disable=SC2086
    "$QIMG" convert $opts cb.qcow2 m.qcow2 >m.err 2>&1
    mrc=$?
    sed -i 's/^qemu-img: /qimg: /' q.err
    assert_eq "convert $opts: exit code" "$qrc" "$mrc"
    assert_eq "convert $opts: messages" "$(cat q.err)" "$(cat m.err)"
    if [ "$qrc" = 0 ] && [ -e q.qcow2 ] && "$QEMU_IMG" info q.qcow2 | grep -q qcow2; then
        compare_bitmaps "convert $opts" a big later
    fi
done

# power loss while the bits are stored (at close)
d=$SCRATCH/crash
mkdir -p "$d"
"$QEMU_IMG" create -q -f qcow2 "$d/img.qcow2" 16M
"$QEMU_IO" -c 'write -P 7 0 2M' "$d/img.qcow2" >/dev/null
"$QEMU_IMG" bitmap --add "$d/img.qcow2" b
"$QEMU_IMG" bitmap --add -g 512k "$d/img.qcow2" c
"$QEMU_IO" -c 'write -P 8 4M 1M' "$d/img.qcow2" >/dev/null
"$QEMU_IMG" convert -O raw "$d/img.qcow2" "$d/A0.raw"
cp "$d/img.qcow2" "$d/after.qcow2"
"$QEMU_IO" -c 'write -P 9 1M 64k' -c 'write -P 9 10M 128k' "$d/after.qcow2" >/dev/null
"$QEMU_IMG" convert -O raw "$d/after.qcow2" "$d/A1.raw"
crash_op bitmap-store "$d" --expect-raw "$d/A0.raw,$d/A1.raw" --expect-mode per-sector \
    --bitmap-check "b=1048576:65536+10485760:131072+4194304:1048576,c=1048576:65536+10485760:131072" \
    -- io -c 'write -P 9 1M 64k' -c 'write -P 9 10M 128k' @IMG@
crash_summary

finish
