#!/bin/bash
# A real QEMU savevm/loadvm round trip through qimg vmstate (skipped without
# qemu-system-x86_64, $QEMU_SYSTEM, and failed without it under CI; no guest
# OS needed: the VM runs its firmware only).
#
#   1. QEMU "savevm snap1" over the HMP monitor; qimg vmstate load of snap1
#      succeeds, its size equals qemu-img info's vm-state-size, and its bytes
#      equal what QEMU itself reads (qemu-img snapshot -a + qemu-io read -b).
#   2. qimg vmstate save of those bytes as snap2 into a copy of the image
#      (buffered, and unbuffered with cache=none as snap3): qemu-img check
#      clean; QEMU loads snap2 both with -loadvm on its command line and
#      with "loadvm" over the monitor, without an error; the image is still
#      clean afterwards.
#   3. Control: a state that is not a migration stream (random bytes) saved
#      with qimg is refused by QEMU's loadvm, so step 2 can fail.
#   4. QEMU savevm into the image qimg wrote (snap4 next to qimg's), and
#      qimg reads it back equal to QEMU's own read; still clean.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io qemu-system-x86_64 cmp python3 timeout

MiB=$((1024 * 1024))

# qemu IMG [QEMU ARGS...] <<< "monitor commands": run the VM with the HMP
# monitor on stdio; the output is left in qemu.out, the exit code returned.
qemu() {
    local img=$1
    shift
    timeout 120 "$QEMU_SYSTEM" -machine pc,accel=tcg -m 64 -nographic -nodefaults \
        -drive "file=$img,format=qcow2,if=virtio" -monitor stdio "$@" >qemu.out 2>&1
}

# monitor_ok DESC RC: QEMU exited 0 and printed no error.
monitor_ok() {
    _checks=$((_checks + 1))
    if [ "$2" != 0 ] || grep -q -i 'error\|fail\|not exist' qemu.out; then
        _fail "$1: QEMU rc $2"
        tr -d '\033' <qemu.out | sed 's/\[K\|\[D//g' | head -n 20
        return 1
    fi
}

qi create -f qcow2 vm.qcow2 64M
"$QEMU_IO" -c "write -q -P 0x42 0 $MiB" vm.qcow2 >/dev/null

# 1. QEMU saves.
printf 'savevm snap1\ninfo snapshots\nquit\n' | qemu vm.qcow2
monitor_ok "savevm snap1" $?
assert_rc "qemu-img check after QEMU's savevm" 0 "$QEMU_IMG" check vm.qcow2
size=$(vm_state_size vm.qcow2 snap1)
_checks=$((_checks + 1))
[ -n "$size" ] && [ "$size" -gt 0 ] || _fail "snap1 has no VM state (size '$size')"

assert_rc "qimg vmstate load snap1" 0 "$QIMG" vmstate load vm.qcow2 snap1 state.bin
assert_eq "size of snap1's state" "$size" "$(stat -c %s state.bin)"
qemu_vmstate_read vm.qcow2 snap1 0 "$size" qemu-state.bin
same_file "snap1 through qimg vs QEMU's own read" qemu-state.bin state.bin

# 2. qimg saves the same bytes; QEMU loads them.
cp vm.qcow2 copy.qcow2
assert_rc "qimg vmstate save snap2" 0 "$QIMG" vmstate save copy.qcow2 snap2 state.bin
assert_rc "qimg vmstate save --unbuffered -t none snap3 (from a pipe)" 0 \
    bash -c "cat state.bin | '$QIMG' vmstate save -t none --unbuffered copy.qcow2 snap3"
assert_rc "qemu-img check after qimg's saves" 0 "$QEMU_IMG" check copy.qcow2
assert_eq "vm-state-size of snap2" "$size" "$(vm_state_size copy.qcow2 snap2)"
assert_eq "vm-state-size of snap3" "$size" "$(vm_state_size copy.qcow2 snap3)"
"$QIMG" vmstate load copy.qcow2 snap2 back.bin
same_file "snap2 read back" state.bin back.bin

for s in snap2 snap3; do
    printf 'info status\nquit\n' | qemu copy.qcow2 -loadvm "$s"
    monitor_ok "-loadvm $s" $?
    printf 'loadvm %s\ninfo status\nquit\n' "$s" | qemu copy.qcow2 -S
    monitor_ok "monitor loadvm $s" $?
done
assert_rc "qemu-img check after QEMU's loadvm" 0 "$QEMU_IMG" check copy.qcow2

# 3. Control: QEMU refuses a state that is not a migration stream.
head -c "$size" /dev/urandom >junk.bin
"$QIMG" vmstate save copy.qcow2 junk junk.bin || _fail "save junk"
printf 'loadvm junk\nquit\n' | qemu copy.qcow2 -S
_checks=$((_checks + 1))
grep -q -i 'error' qemu.out || _fail "control: QEMU loaded random bytes without an error"

# 4. QEMU saves next to qimg's snapshots; qimg reads it as QEMU does.
printf 'savevm snap4\nquit\n' | qemu copy.qcow2 -S
monitor_ok "savevm snap4" $?
assert_rc "qemu-img check after QEMU's savevm next to qimg's" 0 "$QEMU_IMG" check copy.qcow2
size4=$(vm_state_size copy.qcow2 snap4)
"$QIMG" vmstate load copy.qcow2 snap4 state4.bin
assert_eq "size of snap4's state" "$size4" "$(stat -c %s state4.bin)"
qemu_vmstate_read copy.qcow2 snap4 0 "$size4" qemu-state4.bin
same_file "snap4 through qimg vs QEMU's own read" qemu-state4.bin state4.bin
"$QIMG" vmstate load copy.qcow2 snap2 back.bin
same_file "snap2 intact after QEMU's savevm" state.bin back.bin

finish
