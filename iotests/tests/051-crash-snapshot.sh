#!/bin/bash
# Power-loss states of snapshot operations and of a savevm (the crash-state
# explorer, iotests/crash/): `qimg snapshot -c / -a / -d` and `qimg vmstate
# save` on the recording node, over images that mix clusters shared with a
# snapshot and clusters of their own.  In every state qemu-img check finds
# no corruption (v3 images carry the dirty bit while refcounts and COPIED
# flags change, snapshot-write.c R10: those must be repaired clean by
# check -r all), the active disk reads as before (or, for -a, as the
# snapshot), every snapshot that exists reads as it did, and a saved VM
# state reads back whole.  qemu-img over blklogwrites is the positive
# control.  v2 images keep QEMU's OFLAG_COPIED window (no dirty bit): they
# are run as a reported control of our own, not judged (see the note in
# qcow2/snapshot-write.c).
. "${0%/*}/../common.sh"
# make test: every case, 4 power-loss states each (identical states are
# judged once), the positive control (2 states) for the first case only
# (crash/lib.sh: it judges nothing of qimg's), and the v2 cases' operations
# (each must succeed) without their states: those are reported, never
# judged (below), and cost 1.6 s of CPU; QIMG_LONG=1 (make check-long):
# lib.sh's 200 states, the control (100) in every case, and the v2 cases'
# states (100 each)
CRASH_STATES=${CRASH_STATES:-4}
CRASH_CONTROL_STATES=${CRASH_CONTROL_STATES:-2}
. "$IOTESTS_DIR/crash/lib.sh"
requires qimg qemu-img qemu-io python3

# prepare DIR CREATE-OPTS: an image with snapshot "base" and data written
# after it, DIR/img0.qcow2; DIR/A0.raw (active) and DIR/B0.raw (base) hold
# the contents.  Every operation starts from a copy (fresh).
prepare() {
    local d=$1 copts=$2
    rm -rf "$d"
    mkdir -p "$d"
    # shellcheck disable=SC2086
    "$QEMU_IMG" create -q -f qcow2 $copts "$d/img0.qcow2" 8M
    "$QEMU_IO" -c 'write -P 0x11 0 3M' -c 'write -P 0x12 5M 512k' "$d/img0.qcow2" >/dev/null
    "$QEMU_IMG" snapshot -c base "$d/img0.qcow2"
    "$QEMU_IO" -c 'write -P 0x21 1M 1M' -c 'write -P 0x22 6M 1M' -c 'write -z 2560k 128k' \
        "$d/img0.qcow2" >/dev/null
    "$QEMU_IMG" convert -O raw "$d/img0.qcow2" "$d/A0.raw"
    "$QEMU_IMG" convert -l base -O raw "$d/img0.qcow2" "$d/B0.raw"
}

# fresh DIR: DIR/img.qcow2 as prepare left it
fresh() {
    cp "$1/img0.qcow2" "$1/img.qcow2"
}

snapshot_cases() {
    local cfg=$1 copts=$2 d=$SCRATCH/$1
    local ctl_keep=${CONTROL_ONLY:-}

    prepare "$d" "$copts"
    fresh "$d"
    CONTROL_ARGS=(snapshot -c new --image-opts @IMGOPTS@)
    if [ -n "$ctl_keep" ]; then CONTROL=1; fi
    crash_op "snap-create-$cfg" "$d" --expect-raw "$d/A0.raw" \
        --snapshot-check "base=$d/B0.raw,new?=$d/A0.raw" -- snapshot -c new @IMG@

    fresh "$d"
    CONTROL_ARGS=(snapshot -a base --image-opts @IMGOPTS@)
    crash_op "snap-apply-$cfg" "$d" --expect-raw "$d/A0.raw,$d/B0.raw" \
        --snapshot-check "base=$d/B0.raw" -- snapshot -a base @IMG@

    fresh "$d"
    CONTROL_ARGS=(snapshot -d base --image-opts @IMGOPTS@)
    crash_op "snap-delete-$cfg" "$d" --expect-raw "$d/A0.raw" \
        --snapshot-check "base?=$d/B0.raw" -- snapshot -d base @IMG@

    # savevm: the state goes to the vmstate area, then the snapshot is
    # created with it and the active copy dropped (no qemu-img equivalent)
    fresh "$d"
    head -c 3000000 /dev/urandom >"$d/vm.bin"
    unset CONTROL_ARGS
    crash_op "vmstate-save-$cfg" "$d" --expect-raw "$d/A0.raw" \
        --snapshot-check "base=$d/B0.raw,vm1?=$d/A0.raw" --vmstate-check "vm1=$d/vm.bin" \
        -- vmstate save -t writeback @IMG@ vm1 "$d/vm.bin"
    CONTROL=0
}

snapshot_cases v3-64k ""
snapshot_cases v3-4k "-o cluster_size=4k"
snapshot_cases v3-512-rc16 "-o cluster_size=512"
snapshot_cases xl2-16k "-o extended_l2=on,cluster_size=16k"
snapshot_cases lazy "-o lazy_refcounts=on"
# v2: no dirty bit, QEMU's window stays: reported, not judged (make test:
# no states, see the head)
v2_states=$CRASH_CONTROL_STATES
[ -n "${QIMG_LONG:-}" ] || v2_states=0
CRASH_CONTROL_STATES=$v2_states CONTROL_ONLY=1 snapshot_cases v2-64k "-o compat=0.10"

crash_summary
finish
