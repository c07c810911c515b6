#!/bin/bash
# VHD, VHDX and VDI images qemu-img cannot make, built from the specs
# (iotests/hvimg.py), and the cases qemu-img's behaviour is the oracle for:
#  1. VHD sizes: a Virtual PC disk whose CHS geometry is smaller than its
#     current_size, Hyper-V and disk2vhd creators, the maximum geometry --
#     qimg's virtual size and bytes are qemu-img's;
#  2. VHD and VHDX differencing chains read through their parents (qemu-img
#     reads neither: the expected bytes are computed here), info shows the
#     parent, a parent that is not the one recorded is refused, a parent
#     name never selects a protocol (protocol.c invariant 2);
#  3. a VHDX log to replay: qimg reads it replayed in memory (read-only;
#     qemu-img refuses) exactly as qemu-img reads it after its own replay,
#     replays it durably on a read-write open (qimg check -r all prints what
#     qemu-img check -r all prints, and qemu-img then reads the file as
#     replayed); a torn newest entry is ignored as qemu-img ignores it; a
#     complete entry with a bad checksum is refused; a truncated file too;
#  4. a VDI block map entry past the end of the file reads zeros, as in
#     qemu-img, and check reports it as qemu-img does;
#  5. Azure: convert -O vpc -o subformat=fixed,force_size of a size that is
#     not a multiple of 1 MiB gives qemu-img's result and messages;
#  6. 1 TiB sparse images of each format: info, map and convert run in at
#     most 64 MiB of memory (tables are cached, never loaded whole).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3

M=$((1 << 20))
hv() { # python with iotests/hvimg.py imported as h
    python3 -c "import sys; sys.path.insert(0, '$IOTESTS_DIR'); import hvimg as h
$1"
}

# ---- 1. VHD sizes ----
hv '
M = h.MIB
data = bytes(range(256)) * 4096  # 1 MiB
h.vhd_dynamic("vpc.vhd", 10000000, 2 * M, {0: (data, None), 4: (data[:4096], None)},
              creator=b"vpc ")
h.vhd_dynamic("win.vhd", 10000000 // 512 * 512, 2 * M, {1: (data, None)}, creator=b"win ")
h.vhd_dynamic("d2v.vhd", 6 * M, 2 * M, {2: (data, None)}, creator=b"d2v ")
h.vhd_dynamic("max.vhd", 3 * M, 2 * M, {0: (data, None)}, chs=(65535, 16, 255))
h.vhd_fixed("fix.vhd", data * 3, creator=b"vpc ")
'
for img in vpc.vhd win.vhd d2v.vhd max.vhd; do
    same_as_qemu info --output=json "$img"
    same_as_qemu map --output=json "$img"
    "$QEMU_IMG" convert -O raw "$img" "q-$img.raw"
    "$QIMG" convert -O raw "$img" "m-$img.raw"
    same_file "convert $img" "q-$img.raw" "m-$img.raw"
done
same_as_qemu info -f vpc --output=json fix.vhd
assert_eq "Virtual PC geometry, not current_size" 9992192 \
    "$("$QIMG" info --output=json vpc.vhd | python3 -c 'import json,sys; print(json.load(sys.stdin)["virtual-size"])')"

# ---- 2. differencing chains ----
hv '
M = h.MIB
p = bytes([0x11]) * (64 * 1024)
u = h.vhd_dynamic("parent.vhd", 4 * M, 64 * 1024, {0: (p, None), 3: (bytes([0x22]) * 65536, None)})
bm = bytearray(512); bm[0] = 0xF0; bm[15] = 0x01  # sectors 0-3 and 127 from the child
c = bytes([0x33]) * (64 * 1024)
par = {"uuid": u, "name": "parent.vhd", "w2ru": ".\\parent.vhd", "w2ku": "C:\\vm\\parent.vhd"}
h.vhd_dynamic("child.vhd", 4 * M, 64 * 1024, {0: (c, bm), 5: (c, None)}, parent=par)
h.vhd_dynamic("stranger.vhd", 4 * M, 64 * 1024, {0: (c, bm)}, parent=dict(par, uuid=bytes(16)))
'
vsize=$("$QIMG" info --output=json child.vhd | python3 -c 'import json,sys; print(json.load(sys.stdin)["virtual-size"])')
hv "
exp = bytearray($vsize)
exp[0:65536] = b'\x11' * 65536          # parent block 0
exp[3 * 65536:4 * 65536] = b'\x22' * 65536
exp[0:4 * 512] = b'\x33' * (4 * 512)     # the child's sectors 0-3
exp[127 * 512:128 * 512] = b'\x33' * 512 # and 127
exp[5 * 65536:6 * 65536] = b'\x33' * 65536
open('child-expected.raw', 'wb').write(exp)
"
"$QIMG" convert -O raw child.vhd child.raw
same_file "VHD differencing chain" child-expected.raw child.raw
info=$("$QIMG" info --output=json child.vhd)
assert_eq "the parent VHD is named" "./parent.vhd" \
    "$(echo "$info" | python3 -c 'import json,sys; print(json.load(sys.stdin)["backing-filename"])')"
assert_rc "the chain is shown" 0 "$QIMG" info --backing-chain child.vhd
_checks=$((_checks + 1))
if "$QIMG" convert -O raw stranger.vhd s.raw 2>err.txt ||
    ! grep -q "is not the disk this differencing disk was made from" err.txt; then
    _fail "a VHD parent with another unique id is refused: $(cat err.txt)"
fi
hv '
M = h.MIB
p = h.Vhdx(8 * M, M)
p.add_block(0, b"\x44" * M)
p.add_block(1, b"\x55" * M)
p.write("parent.vhdx")
c = h.Vhdx(8 * M, M, parent={"parent_linkage": h.guid_str(p.dw_guid),
                             "relative_path": ".\\parent.vhdx"})
c.add_block(0, b"\x66" * M, state=7)
c.add_bitmap(0, list(range(0, 8)) + [1000])
c.add_block(2, b"\x77" * M)
c.set_state(3, 2)  # ZERO: not the parent
c.write("child.vhdx")
s = h.Vhdx(8 * M, M, parent={"parent_linkage": h.guid_str(bytes(16)),
                             "relative_path": "parent.vhdx"})
s.write("stranger.vhdx")
exp = bytearray(8 * M)
exp[0:M] = b"\x44" * M
exp[M:2 * M] = b"\x55" * M
exp[0:8 * 512] = b"\x66" * (8 * 512)
exp[1000 * 512:1001 * 512] = b"\x66" * 512
exp[2 * M:3 * M] = b"\x77" * M
open("childx-expected.raw", "wb").write(exp)
'
"$QIMG" convert -O raw child.vhdx childx.raw
same_file "VHDX differencing chain" childx-expected.raw childx.raw
assert_eq "the parent VHDX is named" "./parent.vhdx" \
    "$("$QIMG" info --output=json child.vhdx | python3 -c 'import json,sys; print(json.load(sys.stdin)["backing-filename"])')"
_checks=$((_checks + 1))
if "$QIMG" convert -O raw stranger.vhdx s.raw 2>err.txt || ! grep -q "parent_linkage mismatch" err.txt; then
    _fail "a VHDX parent with another data write GUID is refused: $(cat err.txt)"
fi
# a parent name read from an image never selects a protocol or test node
# (protocol.c invariant 2): it is a plain file name
hv '
M = h.MIB
u = h.vhd_dynamic("p.vhd", 4 * M, 64 * 1024, {})
for n, name in (("nbd", "nbd://127.0.0.1/x"), ("dbg", "blkdebug::p.vhd")):
    h.vhd_dynamic(n + ".vhd", 4 * M, 64 * 1024, {}, parent={"uuid": u, "name": name,
                  "w2ru": name, "w2ku": name})
c = h.Vhdx(8 * M, M, parent={"parent_linkage": h.guid_str(bytes(16)),
                             "relative_path": "record:x:parent.vhdx"})
c.write("rec.vhdx")
'
for spec in "nbd.vhd:nbd://127.0.0.1/x" "dbg.vhd:blkdebug::p.vhd" "rec.vhdx:record:x:parent.vhdx"; do
    img=${spec%%:*} name=${spec#*:}
    _checks=$((_checks + 1))
    if "$QIMG" convert -O raw "$img" s.raw 2>err.txt ||
        ! grep -qF "Could not open '$name': No such file or directory" err.txt; then
        _fail "the parent name of $img opens a plain file: $(cat err.txt)"
    fi
done
_checks=$((_checks + 1))
if "$QIMG" io -c 'write 0 512' child.vhdx >out.txt 2>&1 ||
    ! grep -q "Operation not supported" out.txt; then
    _fail "writes into a VHDX differencing disk are refused: $(cat out.txt)"
fi

# ---- 3. a VHDX log to replay ----
"$QEMU_IMG" create -q -f vhdx -o block_size=1M log.vhdx 8M
"$QEMU_IO" -c 'write -P 0x21 0 1M' -c 'write -P 0x42 2M 512k' log.vhdx >/dev/null
# an entry that maps block 1 onto block 0's data and zeros block 2's first 4 KiB
mklog() { # NAME [torn|badcrc|truncated]
    cp log.vhdx "$1"
    hv "
import os, uuid
M = h.MIB
path = '$1'
bat = h.bat_offset(path)
d = open(path, 'rb').read()
page = bytearray(d[bat:bat + 4096])
page[8:16] = page[0:8]
blk2 = int.from_bytes(page[16:24], 'little') >> 20 << 20
g = uuid.uuid4().bytes
flushed = os.path.getsize(path) + (M if '$2' == 'truncated' else 0)
e1 = h.log_entry(7, g, [(bat, bytes(page)), ('zero', blk2, 4096)], flushed)
entries = [(0, e1)]
if '$2' == 'torn':  # a newer entry that would unmap block 0, torn
    p2 = bytearray(page); p2[0:8] = bytes(8)
    entries.append((len(e1), h.log_entry(8, g, [(bat, bytes(p2))], flushed, torn=0)))
if '$2' == 'badcrc':
    p2 = bytearray(page); p2[0:8] = bytes(8)
    entries.append((len(e1), h.log_entry(8, g, [(bat, bytes(p2))], flushed, bad_crc=True)))
h.inject_log(path, entries, g)
"
}
mklog dirty.vhdx
run_both info dirty.vhdx
assert_eq "qemu-img refuses the read-only open" 1 "$Q_RC"
assert_eq "qimg opens it (the log replayed in memory)" 0 "$M_RC"
"$QIMG" convert -O raw dirty.vhdx m-dirty.raw
cp dirty.vhdx q.vhdx
cp dirty.vhdx m-replay.vhdx
"$QEMU_IMG" check -r all -f vhdx q.vhdx >q-check.out 2>&1 # qemu-img's replay, one copy
echo "rc $?" >>q-check.out
"$QIMG" check -r all -f vhdx m-replay.vhdx >m-check.out 2>&1 # qimg's, the other
echo "rc $?" >>m-check.out
assert_eq "check -r all of a dirty log, as qemu-img" "$(sed 's/^qemu-img:/qimg:/' q-check.out)" \
    "$(cat m-check.out)"
"$QEMU_IMG" convert -O raw q.vhdx q-dirty.raw
same_file "in-memory replay = qemu-img's replay" q-dirty.raw m-dirty.raw
"$QEMU_IMG" convert -O raw m-replay.vhdx mq-dirty.raw
same_file "qimg's durable replay, read by qemu-img" q-dirty.raw mq-dirty.raw
assert_rc "after qimg's replay qemu-img check is clean" 0 "$QEMU_IMG" check m-replay.vhdx
python3 -c '
import sys
d = open("m-dirty.raw", "rb").read()
M = 1 << 20
ok = d[M:2 * M] == d[0:M] == bytes([0x21]) * M and d[2 * M:2 * M + 4096] == bytes(4096) \
    and d[2 * M + 4096:2 * M + 8192] == bytes([0x42]) * 4096
sys.exit(0 if ok else 1)' || _fail "the replayed disk reads as the log says"
mklog torn.vhdx torn
"$QIMG" convert -O raw torn.vhdx m-torn.raw
"$QEMU_IMG" check -q -r all torn.vhdx >/dev/null 2>&1
"$QEMU_IMG" convert -O raw torn.vhdx q-torn.raw
same_file "a torn newest entry is ignored, as qemu-img ignores it" q-torn.raw m-torn.raw
same_file "the entry before it replays" q-dirty.raw m-torn.raw
mklog bad.vhdx badcrc
_checks=$((_checks + 1))
if "$QIMG" info bad.vhdx >out.txt 2>&1 || ! grep -q "is corrupt: checksum mismatch" out.txt; then
    _fail "a complete log entry with a bad checksum is refused: $(cat out.txt)"
fi
mklog trunc.vhdx truncated
run_both check -r all trunc.vhdx
assert_eq "a log that expects a longer file: qemu-img refuses" 1 "$Q_RC"
assert_eq "a log that expects a longer file: qimg refuses" 1 "$M_RC"

# ---- 4. VDI: a block map entry past the end of the file ----
"$QEMU_IMG" create -q -f vdi past.vdi 8M
"$QEMU_IO" -c 'write -P 0x31 0 64k' past.vdi >/dev/null
printf '\x09\x00\x00\x00' | dd of=past.vdi bs=1 seek=$((512 + 4 * 5)) conv=notrunc 2>/dev/null
same_as_qemu map --output=json past.vdi
same_as_qemu_err check past.vdi
"$QEMU_IMG" convert -O raw past.vdi q-past.raw
"$QIMG" convert -O raw past.vdi m-past.raw
same_file "a VDI entry past the end reads zeros" q-past.raw m-past.raw

# ---- 5. Azure: a fixed VHD of exactly the size asked ----
head -c 1000001 /dev/urandom >azure.raw
same_as_qemu_err convert -O vpc -o subformat=fixed,force_size azure.raw azure.vhd
mv azure.vhd m-azure.vhd
"$QEMU_IMG" convert -O vpc -o subformat=fixed,force_size azure.raw q-azure.vhd
assert_eq "the file's length" "$(stat -c %s q-azure.vhd)" "$(stat -c %s m-azure.vhd)"
same_as_qemu info -f vpc --output=json m-azure.vhd
_checks=$((_checks + 1))
python3 - m-azure.vhd q-azure.vhd <<'PY' || _fail "the fixed VHD as qemu-img makes it"
import sys
a, b = (open(p, "rb").read() for p in sys.argv[1:3])
fa, fb = bytearray(a[-512:]), bytearray(b[-512:])
for f in (fa, fb):  # all but the timestamp, checksum and unique id
    f[24:28] = bytes(4)
    f[64:84] = bytes(20)
sys.exit(0 if a[:-512] == b[:-512] and fa == fb else 1)
PY

# ---- 6. 1 TiB sparse images in bounded memory ----
for fmt in vpc vhdx vdi qed; do
    "$QEMU_IMG" create -q -f "$fmt" "big.$fmt" 1T
    "$QEMU_IO" -f "$fmt" -c 'write -P 1 0 1M' -c 'write -P 2 500G 1M' -c 'write -P 3 1023G 64k' \
        "big.$fmt" >/dev/null
    for cmd in "info big.$fmt" "map --output=json big.$fmt" "convert -O qcow2 big.$fmt out.qcow2"; do
        rm -f out.qcow2
        # shellcheck disable=SC2086
        rss=$(python3 - "$QIMG" $cmd <<'PY'
import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
PY
        )
        _checks=$((_checks + 1))
        if [ -z "$rss" ] || [ "$rss" -gt 64 ]; then
            _fail "qimg $cmd: ${rss:-?} MiB of memory (at most 64)"
        fi
    done
    # what qemu-img reads of the result: the three writes, and no other data
    # (qemu-img compare would read all of a 1 TiB VHDX: it has no block
    # status for it)
    assert_rc "the 1 TiB $fmt converted: its data" 0 "$QEMU_IO" -r -f qcow2 \
        -c 'read -P 1 0 1M' -c 'read -P 2 500G 1M' -c 'read -P 3 1023G 64k' out.qcow2
    assert_eq "the 1 TiB $fmt converted: nothing else allocated" \
        "[(0, 1048576), (536870912000, 1048576), (1098437885952, 65536)]" \
        "$("$QEMU_IMG" map --output=json out.qcow2 | python3 -c '
import json, sys
print([(e["start"], e["length"]) for e in json.load(sys.stdin) if e["data"]])')"
done

finish
