#!/bin/bash
# qimg convert -C (copy offloading: qimg/copy.h rule 7, tools/convert.c
# fact 8; issue 29, QEMU's 244 and 082) against qemu-img convert -C: raw
# and qcow2 targets, new and existing (-n), qcow2 sources with data that
# holds zeros (copied whole, not sparsified), zero clusters, a backing
# file, other cluster sizes, several sources; the same contents, the same
# allocation map (host offsets aside), a clean check.  Where qemu-img falls
# back to reading and writing (a compressed source cluster, an odd-sized
# raw source's tail, an encrypted source, a blkdebug data file, a source on
# another filesystem: EXDEV) qimg does too, with -m 1 (with more requests
# in flight, which chunks were already taken when copy_range first failed
# is a race, in QEMU too).  Under
# strace, qimg copies with copy_file_range exactly where
# qemu-img does.  The refusals (-c, -S, --salvage) with qemu-img's words.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3 strace

mk_qcow2 s.qcow2 8M "" 'write -P 0x22 0 1M' 'write -P 0 1M 1M' 'write -z 3M 1M' \
    'write -P 0x33 5M 100k'
mk_qcow2 base.qcow2 4M "" 'write -P 0x44 0 4M'
mk_qcow2 top.qcow2 6M "backing_file=base.qcow2,backing_fmt=qcow2" 'write -P 0x55 1M 64k' \
    'write -z 2M 64k'
mk_qcow2 small.qcow2 3M "cluster_size=4k" 'write -P 0x66 0 100k' 'write -P 0 1M 1M'
mk_qcow2 comp.qcow2 4M "" 'write -P 1 0 1M' 'write -c -P 2 1M 64k' 'write -P 0 2M 1M'
head -c 1000 /dev/urandom >odd.raw

# offloads DESC TOOL ARGS...: OFFLOADS = how many copy_file_range calls
# TOOL ARGS makes; the run must succeed with nothing on stderr (traced:
# else its own FAILED line, return 1, OFFLOADS=-)
offloads() {
    local desc=$1
    shift
    OFFLOADS=-
    traced "$desc" st.out -e trace=copy_file_range -- "$@" || return 1
    OFFLOADS=$(grep -c 'copy_file_range(' st.out)
}

# same_c DESC FMT [PRE] -- ARGS...: qemu-img and qimg convert -C -O FMT
# ARGS into q.FMT and m.FMT (existing ones of PRE bytes with -n when PRE
# is set), compared
same_c() {
    local desc=$1 fmt=$2 pre=$3 q m
    shift 4
    rm -f "q.$fmt" "m.$fmt"
    if [ -n "$pre" ]; then
        qi create -q -f "$fmt" "q.$fmt" "$pre"
        qi create -q -f "$fmt" "m.$fmt" "$pre"
        set -- -n "$@"
    fi
    offloads "$desc: qemu-img" "$QEMU_IMG" convert -C -O "$fmt" "$@" "q.$fmt"
    q=$OFFLOADS
    offloads "$desc: qimg" "$QIMG" convert -C -O "$fmt" "$@" "m.$fmt"
    m=$OFFLOADS
    if [ "$q" != - ] && [ "$m" != - ]; then
        assert_eq "$desc: copy_file_range used" "$([ "$q" -gt 0 ] && echo yes || echo no)" \
            "$([ "$m" -gt 0 ] && echo yes || echo no)"
    fi
    assert_rc "$desc: contents" 0 "$QEMU_IMG" compare -q -f "$fmt" -F "$fmt" "q.$fmt" "m.$fmt"
    assert_eq "$desc: map" "$(map_flags "q.$fmt" "$fmt")" "$(map_flags "m.$fmt" "$fmt")"
    if [ "$fmt" = qcow2 ]; then
        assert_rc "$desc: check" 0 "$QEMU_IMG" check -q "m.$fmt"
    fi
}

for fmt in raw qcow2; do
    same_c "$fmt: data holding zeros" "$fmt" "" -- s.qcow2
    same_c "$fmt: backing file" "$fmt" "" -- top.qcow2
    same_c "$fmt: 4k clusters" "$fmt" "" -- small.qcow2
    same_c "$fmt: -n" "$fmt" 16M -- s.qcow2
    same_c "$fmt: -m 1 -W" "$fmt" "" -- -m 1 -W s.qcow2
    same_c "$fmt: several sources" "$fmt" "" -- s.qcow2 top.qcow2 small.qcow2
    same_c "$fmt: compressed cluster" "$fmt" "" -- -m 1 comp.qcow2
    same_c "$fmt: odd raw source" "$fmt" "" -- -m 1 odd.raw s.qcow2
done
same_c "qcow2: 2M target clusters" qcow2 "" -- -o cluster_size=2M s.qcow2
same_c "qcow2: 4k target clusters" qcow2 "" -- -o cluster_size=4k top.qcow2
# -n onto a qcow2 whose clusters are allocated: rewritten in place
qi convert -O qcow2 s.qcow2 n.qcow2
cp n.qcow2 q.qcow2
assert_rc "-n over allocated clusters" 0 "$QIMG" convert -C -n -O qcow2 top.qcow2 n.qcow2
assert_rc "-n over allocated clusters: qemu-img" 0 "$QEMU_IMG" convert -C -n -O qcow2 \
    top.qcow2 q.qcow2
assert_rc "-n over allocated clusters: contents" 0 "$QEMU_IMG" compare -q top.qcow2 n.qcow2
assert_eq "-n over allocated clusters: map" "$(map_flags q.qcow2)" "$(map_flags n.qcow2)"
assert_rc "-n over allocated clusters: check" 0 "$QEMU_IMG" check -q n.qcow2

# a source on another filesystem: the kernel says EXDEV (or copies, on
# kernels that copy across filesystems): qimg falls back as qemu-img does
shm=/dev/shm/qimg-178.$$
if [ -d /dev/shm ] && mkdir "$shm" 2>/dev/null; then
    cp s.qcow2 "$shm/s.qcow2"
    if [ "$(stat -c %d "$shm")" != "$(stat -c %d .)" ]; then
        same_c "another filesystem" qcow2 "" -- -m 1 "$shm/s.qcow2"
    fi
    rm -rf "$shm"
fi

# an encrypted source is read and written (qemu-img: no copy_range)
SEC=(--object secret,id=sec0,data=123456)
qi create -q -f qcow2 "${SEC[@]}" \
    -o encrypt.format=luks,encrypt.key-secret=sec0,encrypt.iter-time=10 enc.qcow2 2M
ENC="driver=qcow2,file.filename=enc.qcow2,encrypt.key-secret=sec0"
"$QEMU_IO" "${SEC[@]}" --image-opts "$ENC" -c 'write -P 7 0 1M' >/dev/null
rm -f m.qcow2 q.qcow2
offloads "encrypted: qemu-img" "$QEMU_IMG" convert -C "${SEC[@]}" --image-opts "$ENC" \
    -O qcow2 q.qcow2 && q=$OFFLOADS &&
    offloads "encrypted: qimg" "$QIMG" convert -C "${SEC[@]}" --image-opts "$ENC" \
        -O qcow2 m.qcow2 &&
    assert_eq "encrypted: copy_file_range calls" "$q" "$OFFLOADS"
qi convert "${SEC[@]}" --image-opts "$ENC" -O raw enc.raw
assert_rc "encrypted: contents" 0 "$QEMU_IMG" compare -q enc.raw m.qcow2

# QEMU's 244: a blkdebug data file takes no copy: read and written
qi create -q -f qcow2 -o data_file=d.data d.qcow2 8M
BLKDEBUG="json:{'driver': 'qcow2', 'file': {'driver': 'file', 'filename': 'd.qcow2'},
    'data-file': {'driver': 'blkdebug', 'image': {'driver': 'file', 'filename': 'd.data'}}}"
assert_rc "blkdebug data file" 0 "$QIMG" convert -C -n -O qcow2 s.qcow2 "$BLKDEBUG"
assert_rc "blkdebug data file: contents" 0 "$QEMU_IMG" compare -q -F qcow2 s.qcow2 \
    "$BLKDEBUG"

# refusals, in qemu-img's order and words
same_as_qemu_err convert -C -c -O qcow2 s.qcow2 t.qcow2
same_as_qemu_err convert -C -S 4k -O qcow2 s.qcow2 t.qcow2
same_as_qemu_err convert -C -S 0 -O qcow2 s.qcow2 t.qcow2
same_as_qemu_err convert -C --salvage -O qcow2 s.qcow2 t.qcow2
same_as_qemu_err convert -C -c -S 4k --salvage -O qcow2 s.qcow2 t.qcow2
finish
