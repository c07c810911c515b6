#!/bin/bash
# 206-convert-stats: QIMG_COPY_STATS (tools/convert-copy.c fact 3, qimg/copy.h
# rule 8) is honoured: set to 1, qimg convert prints on stderr where the
# copy's workers spent their time, the requests and bytes it issued (the
# data read and written, holes as nothing into a new qcow2 and as zeroes
# requests with -n into a raw file), then the final flush's time; -c counts
# compression; unset, empty or 0 prints nothing; the copy is the same
# either way (qemu-img compare).
. "${0%/*}/../common.sh"
requires qimg qemu-img python3

# 8 MiB: data at [0, 2M) and [4M, 6M), holes elsewhere
python3 - <<'PY'
import random
random.seed(206)
with open('src.raw', 'wb') as f:
    f.truncate(8 << 20)
    for off in (0, 4 << 20):
        f.seek(off)
        f.write(random.getrandbits(8 * (2 << 20)).to_bytes(2 << 20, 'little'))
PY

# the lines with every number of seconds made S
times_filter() {
    sed -e 's/[0-9]*\.[0-9][0-9][0-9] s/S s/g'
}

QIMG_COPY_STATS=1 "$QIMG" convert -m 4 -f raw -O qcow2 src.raw a.qcow2 2>err.out
assert_eq "stats: exit code and stdout" 0 $?
assert_eq "stats: what qcow2 convert prints" "copy stats: 4 workers, wall S s, cpu S s
copy stats: summed over the workers: read S s, write S s, turn S s, lock S s, plan S s, compress S s
copy stats: 2 reads (4194304 bytes), 2 writes (4194304 bytes), 0 zeroes (0 bytes)
copy stats: flush S s" "$(times_filter <err.out)"
assert_rc "stats: the copy equals the source" 0 "$QEMU_IMG" compare -q -f raw src.raw a.qcow2
# the times are real: the workers' wall time is above 0, compress is 0
grep -q 'wall 0\.000 s' err.out && _fail "stats: a wall time of 0"
grep -q 'compress 0\.000 s' err.out || _fail "stats: compression counted without -c"
_checks=$((_checks + 2))

head -c 8M /dev/urandom >b.raw # a target that does not read as zeros
QIMG_COPY_STATS=1 "$QIMG" convert -n -m 4 -f raw -O raw src.raw b.raw 2>err.out
assert_eq "stats -n raw: requests" \
    "copy stats: 2 reads (4194304 bytes), 2 writes (4194304 bytes), 2 zeroes (4194304 bytes)" \
    "$(grep -E '^copy stats: [0-9]+ reads' err.out)"
assert_rc "stats -n raw: the copy equals the source" 0 "$QEMU_IMG" compare -q -f raw -F raw src.raw b.raw

QIMG_COPY_STATS=1 "$QIMG" convert -c -m 4 -f raw -O qcow2 src.raw c.qcow2 2>err.out
assert_eq "stats -c: one write per cluster" \
    "copy stats: 64 reads (4194304 bytes), 64 writes (4194304 bytes), 0 zeroes (0 bytes)" \
    "$(grep -E '^copy stats: [0-9]+ reads' err.out)"
grep -q 'compress 0\.000 s' err.out && _fail "stats -c: no compression counted"
_checks=$((_checks + 1))
assert_rc "stats -c: the copy equals the source" 0 "$QEMU_IMG" compare -q -f raw src.raw c.qcow2

for v in unset "" 0; do
    rm -f d.qcow2
    if [ "$v" = unset ]; then
        env -u QIMG_COPY_STATS "$QIMG" convert -f raw -O qcow2 src.raw d.qcow2 2>err.out
    else
        QIMG_COPY_STATS=$v "$QIMG" convert -f raw -O qcow2 src.raw d.qcow2 2>err.out
    fi
    assert_eq "QIMG_COPY_STATS $v: nothing on stderr" "" "$(cat err.out)"
done
finish
