#!/bin/bash
# 161-vdi-check-map-hole: qimg check of a VDI image whose block map has a
# hole in the file (a sparse file: the map's pages were never written, or
# were punched out).  QEMU reads the hole as zeros: 1024 entries naming
# block index 0, each a second use of it.  qimg counts the entries of a
# hole without reading them (vdi.c invariant 6, as it counts the part of
# the map past the end of the file); what it reports is qemu-img's: the
# exit code, stdout (the error count), and stderr's messages up to qimg's
# cap of 1000 (then "(N further messages were not kept)").  A VDI map can
# hold 2^27 entries (512 MiB): a fuzzed image whose file grew past such a
# map took 45 s in the check under ASan (fuzz/regress/fuzz-vdi).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3

"$QEMU_IMG" create -q -f vdi h.vdi 64G || exit 1 # a 256 KiB map at 512
"$QEMU_IO" -c 'write -P 0x31 0 64k' h.vdi >/dev/null || exit 1
# a 4 KiB hole in the map: entries 16256 to 17279
fallocate -p -o 65536 -l 4096 h.vdi 2>/dev/null
hole=$(python3 -c "import os; print(os.lseek(os.open('h.vdi', os.O_RDONLY), 65536, os.SEEK_HOLE))")
[ "$hole" = 65536 ] || skip "the scratch file system cannot punch a hole"

run_both check -f vdi h.vdi
assert_eq "check rc, as qemu-img" "$Q_RC" "$M_RC"
assert_eq "check stdout, as qemu-img" "$Q_OUT" "$M_OUT"
assert_eq "the first 1000 messages, as qemu-img" \
    "$(printf '%s\n' "$Q_ERR" | head -n 1000)" "$(printf '%s\n' "$M_ERR" | head -n 1000)"
assert_eq "the messages past 1000, counted" "(25 further messages were not kept)" \
    "$(printf '%s\n' "$M_ERR" | tail -n 1)"
assert_eq "qemu-img's last message" "ERROR: allocated blocks mismatch, is 1025, should be 1" \
    "$(printf '%s\n' "$Q_ERR" | tail -n 1)"

finish
