#!/bin/bash
# VM state interoperability between qimg vmstate and QEMU's own vmstate path.
#
# qimg -> QEMU: states of 1, 4095, 1 MiB + 3 and 20 MiB random bytes saved
# with "qimg vmstate save" (buffered with several buffer sizes and depths,
# unbuffered, cache=none, from a pipe, QEMU-shaped pieces) on several qcow2
# variants (cluster sizes 512..2M, extended L2; with QIMG_LONG=1 also
# compat 0.10 and disks ending on and off an L1-entry boundary).  After
# each save qemu-img check is clean (no leaks either) and qemu-img info
# reports the vm-state-size; on one copy of the image, for each snapshot
# "qemu-img snapshot -a" then "qemu-io -c 'read -b -v 0 N'" (QEMU's own
# load_vmstate path) returns the input (of the 1 MiB + 3 and 20 MiB
# states, make test reads three 128 KiB windows this way -- the start,
# across the middle, the end --, QIMG_LONG=1 all of it), and the disk
# reverted to is the image's own (the saves left it alone); qimg vmstate
# load (with and without --apply) returns the input too.
#
# QEMU -> qimg: a state written with "qemu-io -c 'write -b -s FILE 0 N'"
# (QEMU's save_vmstate into the active L1), captured by "qemu-img snapshot
# -c".  qemu-img records no VM state size for it (vm-state-size 0: a
# disk-only snapshot), so the size is patched into the snapshot table
# entry (also below the written length: 1 of 512 bytes); qimg vmstate load
# must then return exactly those bytes.  (042 does the same with a real
# QEMU savevm.)  make test leaves out (QIMG_LONG=1 runs it) the 20 MiB
# state of this kind in 512-byte clusters (3.7 s of CPU, a third of the
# variant's: qemu-io's own writes and copy-on-write of 40960 clusters);
# its 1 MiB + 3 state spans 33 L2 tables there, and the other variants
# load 20 MiB states of QEMU's.
#
# Errors: unknown snapshot, disk-only snapshot, raw image, name in use,
# empty or missing stream, unwritable output, a full file system.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io cmp python3

KiB=1024
MiB=$((1024 * 1024))

head -c $((21 * MiB)) /dev/urandom >rand.bin
for n in 1 4095 $((MiB + 3)) $((20 * MiB)); do
    head -c "$n" rand.bin >"in-$n.bin"
done

# set_vm_state_size IMG NAME SIZE [NAME SIZE...]: patch the snapshot table
# entries (both the 32-bit field and the 64-bit extra field), as if savevm
# had recorded them.
set_vm_state_size() {
    python3 - "$@" <<'EOF'
import struct, sys
path, todo = sys.argv[1], dict(zip(sys.argv[2::2], sys.argv[3::2]))
with open(path, "r+b") as f:
    hdr = f.read(72)
    nb, = struct.unpack(">I", hdr[60:64])
    off, = struct.unpack(">Q", hdr[64:72])
    for _ in range(nb):
        f.seek(off)
        e = f.read(40)
        id_len, name_len = struct.unpack(">HH", e[12:16])
        extra, = struct.unpack(">I", e[36:40])
        f.seek(off + 40 + extra + id_len)
        name = f.read(name_len).decode()
        if name in todo:
            size = int(todo.pop(name))
            f.seek(off + 32)
            f.write(struct.pack(">I", size if size <= 0xffffffff else 0))
            if extra >= 8:
                f.seek(off + 40)
                f.write(struct.pack(">Q", size))
        off += (40 + extra + id_len + name_len + 7) // 8 * 8
if todo:
    sys.exit("snapshots not found: %s" % " ".join(todo))
EOF
}

# vm_state_sizes IMG: "NAME SIZE" of every snapshot, per qemu-img info.
vm_state_sizes() {
    "$QEMU_IMG" info --output=json "$1" | python3 -c '
import json, sys
for s in json.load(sys.stdin).get("snapshots", []):
    print(s["name"], s["vm-state-size"])'
}

# qemu_vmstates DESC IMG "NAME FILE [OFF:LEN...]"...: on one copy of IMG,
# for each snapshot NAME in turn: "qemu-img snapshot -a NAME", then the
# copy's disk must equal IMG's (qemu-img compare), and one qemu-io with a
# "read -b -v" of whole sectors per window must show the bytes of FILE in
# each window [OFF, OFF+LEN) of NAME's VM state (without windows: all of
# FILE); one python3 parses every hex dump at the end.
qemu_vmstates() {
    local desc=$1 img=$2 spec name file w off len first end args i=0 py=() rc
    shift 2
    cp "$img" .qv.qcow2 || {
        _checks=$((_checks + 1))
        _fail "$desc: copy of $img"
        return
    }
    for spec in "$@"; do
        read -r name file spec <<<"$spec"
        [ -n "$spec" ] || spec="0:$(stat -c %s "$file")"
        args=()
        for w in $spec; do
            off=${w%%:*} len=${w#*:}
            first=$((off / 512 * 512)) end=$(((off + len + 511) / 512 * 512))
            args+=(-c "read -b -v $first $((end - first))")
        done
        if ! "$QEMU_IMG" snapshot -a "$name" .qv.qcow2 >.qv.out 2>&1; then
            _checks=$((_checks + 1))
            _fail "$desc: qemu-img snapshot -a $name: $(cat .qv.out)"
            continue
        fi
        assert_rc "$desc: disk of $name" 0 "$QEMU_IMG" compare -q "$img" .qv.qcow2
        "$QEMU_IO" "${args[@]}" .qv.qcow2 >".qv.$i.out" 2>&1
        py+=("$desc: $name through qemu-img snapshot -a + qemu-io read -b" "$file" ".qv.$i.out"
            "$spec")
        i=$((i + 1))
    done
    python3 -c '
import sys
a = sys.argv[1:]
for what, file, dump, wins in zip(a[0::4], a[1::4], a[2::4], a[3::4]):
    want = open(file, "rb").read()
    got = {}
    for line in open(dump, "rb"):
        # "0000fe00:  xx xx ... xx  ascii": the offset, 16 bytes of hex
        if len(line) > 58 and line[8:11] == b":  ":
            got[int(line[:8], 16)] = bytes.fromhex(line[11:58].decode())
    for w in wins.split():
        off, n = map(int, w.split(":"))
        first = off // 16 * 16
        b = b"".join(got.get(o, b"") for o in range(first, off + n, 16))
        if b[off - first:off - first + n] != want[off:off + n]:
            print("BAD %s: differs in [%d, %d)" % (what, off, off + n))
            break' "${py[@]}" >.qv.out 2>&1
    rc=$?
    _checks=$((_checks + i))
    fail_bad_lines .qv.out $rc "$desc: the VM states through qemu-io"
    rm -f .qv.qcow2 .qv.*.out
}

# same_later DESC EXPECTED ACTUAL: a check that file ACTUAL has the bytes of
# EXPECTED (as cmp), made by same_now with the others queued: one python3
# compares them all (a variant's loads, 20 of them, cost a cmp each).
queued=()
same_later() { queued+=("$1" "$2" "$3"); }
same_now() {
    [ ${#queued[@]} -gt 0 ] || return 0
    python3 -c '
import sys
a, want = sys.argv[1:], {}
for desc, exp, got in zip(a[0::3], a[1::3], a[2::3]):
    if exp not in want:
        want = {exp: open(exp, "rb").read()}
    try:
        with open(got, "rb") as f:
            if f.read() != want[exp]:
                print("BAD %s: %s differs from %s" % (desc, got, exp))
    except OSError as e:
        print("BAD %s: %s" % (desc, e))' "${queued[@]}" >.same.out 2>&1
    local rc=$?
    _checks=$((_checks + ${#queued[@]} / 3))
    fail_bad_lines .same.out $rc "the comparisons of the loads"
    queued=()
    rm -f load-*.out
}

# check_clean DESC IMG: qemu-img check finds neither errors nor leaks.
check_clean() {
    assert_rc "$1: qemu-img check" 0 "$QEMU_IMG" check "$2"
}

# variant: "create options|disk size"
variants=(
    "|64M"
    "cluster_size=512|1049088"
    "cluster_size=2M|100M"
    "extended_l2=on|64M"
)
# QIMG_LONG=1 (make check-long): the other layouts too
if [ -n "${QIMG_LONG:-}" ]; then
    variants+=(
        "compat=0.10|64M"
        "|512M"
        "cluster_size=4k,refcount_bits=64|3G"
    )
fi
sizes=(1 4095 $((MiB + 3)) $((20 * MiB)))
# How each size is saved (rotated across the variants).
modes=(
    ""
    "--unbuffered"
    "--in-flight 1 --buffer-size 64k"
    "-t none --buffer-size 4M --in-flight 3"
    "pipe"
    "--qemu-shaped 7"
    "-t writethrough --in-flight 16"
)

vi=0
for v in "${variants[@]}"; do
    opts=${v%%|*}
    dsize=${v#*|}
    V="[$opts $dsize]"
    qi create -f qcow2 ${opts:+-o "$opts"} img.qcow2 "$dsize"
    qio img.qcow2 "write -q -s rand.bin 0 $MiB"

    si=0
    for n in "${sizes[@]}"; do
        mode=${modes[$(((vi + si) % ${#modes[@]}))]}
        name="s-$n"
        if [ "$mode" = pipe ]; then
            cat "in-$n.bin" | "$QIMG" vmstate save img.qcow2 "$name" >.out 2>&1
        else
            # shellcheck disable=SC2086
            "$QIMG" vmstate save $mode img.qcow2 "$name" "in-$n.bin" >.out 2>&1
        fi
        rc=$?
        assert_eq "$V: vmstate save $n bytes ($mode) rc" 0 "$rc" || cat .out
        check_clean "$V: after saving $n bytes ($mode)" img.qcow2
        si=$((si + 1))
    done
    assert_eq "$V: vm-state-size of each" "$(for n in "${sizes[@]}"; do echo "s-$n $n"; done)" \
        "$(vm_state_sizes img.qcow2)"
    # The VM SIZE column (and the rest of the list) as qemu-img shows it.
    assert_eq "$V: qimg snapshot -l equals qemu-img snapshot -l" \
        "$("$QEMU_IMG" snapshot -l img.qcow2)" "$("$QIMG" snapshot -l img.qcow2 2>&1)"
    # Each snapshot through QEMU's load path, and its disk: the active disk
    # was not touched, every snapshot has its contents.  (20 MiB through
    # qemu-io's hex dump cost seconds, 1 MiB half a second: in make test
    # their first and last 128 KiB and 128 KiB across their middle, all of
    # them with QIMG_LONG=1)
    states=()
    for n in "${sizes[@]}"; do
        if [ "$n" -gt $((384 * KiB)) ] && [ -z "${QIMG_LONG:-}" ]; then
            states+=("s-$n in-$n.bin 0:131072 $((n / 2 - 65536 - 3)):131072 $((n - 131072)):131072")
        else
            states+=("s-$n in-$n.bin")
        fi
    done
    qemu_vmstates "$V" img.qcow2 "${states[@]}"

    for n in "${sizes[@]}"; do
        name="s-$n"
        "$QIMG" vmstate load img.qcow2 "$name" "load-$n-f.out"
        assert_eq "$V: vmstate load $name rc" 0 "$?"
        same_later "$V: $name through qimg vmstate load" "in-$n.bin" "load-$n-f.out"
        "$QIMG" vmstate load img.qcow2 "$name" >"load-$n-o.out"
        same_later "$V: $name through qimg vmstate load to stdout" "in-$n.bin" "load-$n-o.out"
        # O_DIRECT: 8 MiB reads split across the pool (api/vmstate.c
        # invariant 8), and 32 KiB reads read ahead (invariant 6)
        "$QIMG" vmstate load -t none img.qcow2 "$name" "load-$n-d.out"
        same_later "$V: $name through qimg vmstate load -t none" "in-$n.bin" "load-$n-d.out"
        "$QIMG" vmstate load -t none --chunk-size 32k img.qcow2 "$name" "load-$n-c.out"
        same_later "$V: $name through qimg vmstate load -t none, 32k reads" "in-$n.bin" \
            "load-$n-c.out"
    done
    # load --apply reverts the disk (like loadvm) and reads the state from
    # the active L1; the image stays clean.
    cp img.qcow2 apply.qcow2
    qio apply.qcow2 "write -q -P 0x5a 0 $MiB"
    n=$((MiB + 3))
    "$QIMG" vmstate load --apply apply.qcow2 "s-$n" load-apply.out
    assert_eq "$V: vmstate load --apply rc" 0 "$?"
    same_later "$V: s-$n through qimg vmstate load --apply" "in-$n.bin" load-apply.out
    check_clean "$V: after load --apply" apply.qcow2
    "$QEMU_IMG" convert -l "s-$n" -O qcow2 apply.qcow2 s.qcow2
    assert_rc "$V: disk after load --apply" 0 "$QEMU_IMG" compare -q s.qcow2 apply.qcow2
    rm -f apply.qcow2 s.qcow2

    # QEMU -> qimg (the sizes patched once all four snapshots exist).
    patch=()
    pairs=("512:1" "4096:4095" "$((MiB + 512)):$((MiB + 3))" "$((20 * MiB)):$((20 * MiB))")
    # (make test: no 20 MiB state of QEMU's in 512-byte clusters, the header says why)
    [ "$opts" = cluster_size=512 ] && [ -z "${QIMG_LONG:-}" ] && unset 'pairs[3]'
    for pair in "${pairs[@]}"; do
        len=${pair%%:*}
        n=${pair#*:}
        name="q-$n"
        qio img.qcow2 "write -b -q -s rand.bin 0 $len"
        qi snapshot -c "$name" img.qcow2
        patch+=("$name" "$n")
        # Only the state of this snapshot: later writes must not show.
        qio img.qcow2 "write -b -q -P 0xee 0 $len"
    done
    set_vm_state_size img.qcow2 "${patch[@]}" || exit 1
    assert_eq "$V: patched vm-state-sizes" "$(printf '%s %s\n' "${patch[@]}")" \
        "$(vm_state_sizes img.qcow2 | grep '^q-')"
    check_clean "$V: after qemu-io write -b" img.qcow2
    for pair in "${pairs[@]}"; do
        n=${pair#*:}
        "$QIMG" vmstate load img.qcow2 "q-$n" "load-q$n.out"
        assert_eq "$V: vmstate load q-$n rc" 0 "$?"
        same_later "$V: qemu-io's state q-$n through qimg vmstate load" "in-$n.bin" \
            "load-q$n.out"
    done
    same_now
    rm -f img.qcow2
    vi=$((vi + 1))
done

# ---- errors ----
qi create -f qcow2 e.qcow2 64M
qi snapshot -c disk e.qcow2
"$QIMG" vmstate save e.qcow2 st in-4095.bin || _fail "setup: save st"

err() {
    local desc=$1 want=$2 out rc
    shift 2
    out=$("$@" 2>&1 >/dev/null)
    rc=$?
    assert_eq "$desc: exit code" 1 "$rc"
    assert_eq "$desc: message" "$want" "$out"
}

err "unknown snapshot" "qimg: Could not load VM state of snapshot 'nope': Snapshot 'nope' does not exist" \
    "$QIMG" vmstate load e.qcow2 nope out.bin
_checks=$((_checks + 1))
[ -e out.bin ] && _fail "unknown snapshot: output file created"
err "disk-only snapshot" \
    "qimg: Could not load VM state of snapshot 'disk': This is a disk-only snapshot. Revert to it offline using qemu-img" \
    "$QIMG" vmstate load e.qcow2 disk out.bin
err "name in use" "qimg: Could not save VM state to snapshot 'st': Snapshot 'st' already exists" \
    "$QIMG" vmstate save e.qcow2 st in-1.bin
err "empty stream" "qimg: Could not save VM state to snapshot 'x': the stream '/dev/null' is empty" \
    "$QIMG" vmstate save e.qcow2 x /dev/null
err "missing stream" "qimg: Could not open 'missing.bin': No such file or directory" \
    "$QIMG" vmstate save e.qcow2 x missing.bin
err "unwritable output" "qimg: Could not write the VM state to '/dev/full': No space left on device" \
    "$QIMG" vmstate load e.qcow2 st /dev/full
truncate -s 1M r.raw
err "raw image save" "qimg: Could not save VM state to snapshot 'x': Format 'raw' does not support internal snapshots" \
    "$QIMG" vmstate save -f raw r.raw x in-1.bin
err "raw image load" "qimg: Could not load VM state of snapshot 'x': Format 'raw' does not support internal snapshots" \
    "$QIMG" vmstate load -f raw r.raw x out.bin
check_clean "errors" e.qcow2
assert_eq "errors: snapshots left" "disk st" \
    "$("$QEMU_IMG" info --output=json e.qcow2 | python3 -c '
import json, sys
print(" ".join(s["name"] for s in json.load(sys.stdin).get("snapshots", [])))')"
"$QIMG" vmstate load e.qcow2 st out.bin
same_file "errors: st intact" in-4095.bin out.bin

# A full file system during the save: a clear error, no snapshot, no
# corruption (leaks allowed).
mkdir -p small
if mount -t tmpfs -o size=3M tmpfs small 2>/dev/null; then
    qi create -f qcow2 small/f.qcow2 64M
    out=$("$QIMG" vmstate save small/f.qcow2 big "in-$((20 * MiB)).bin" 2>&1)
    rc=$?
    assert_eq "ENOSPC: exit code" 1 "$rc"
    _checks=$((_checks + 1))
    [[ "$out" == "qimg: Could not save VM state to snapshot 'big': "*"No space left on device"* ]] ||
        _fail "ENOSPC: message: $out"
    "$QEMU_IMG" check small/f.qcow2 >.out 2>&1
    rc=$?
    _checks=$((_checks + 1))
    if [ "$rc" != 0 ] && [ "$rc" != 3 ]; then
        _fail "ENOSPC: qemu-img check rc $rc"
        cat .out
    fi
    assert_eq "ENOSPC: no snapshot" "" "$("$QEMU_IMG" snapshot -l small/f.qcow2)"
    umount small
else
    echo "note: cannot mount a small tmpfs; ENOSPC case not run"
fi

finish
