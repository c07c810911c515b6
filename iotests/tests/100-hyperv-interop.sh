#!/bin/bash
# VHD (vpc), VHDX, VDI and QED against qemu-img 7.2, both directions:
#  1. images qemu-img makes, in every subformat, with data qemu-io wrote:
#     qimg's info JSON, map JSON (vpc, vdi, qed; VHDX: qemu-img has no
#     block status, so qimg's map is checked against the blocks written),
#     check output and exit code equal qemu-img's; qimg converts them to
#     raw byte for byte as qemu-img does, and compare/dd agree; `qimg nbd`
#     serves them as qemu-img reads them, and takes writes;
#  2. images qimg makes (create, convert -O, each subformat and option):
#     qemu-img reads them as their source, its check is clean, its info is
#     qimg's, the files are as long as qemu-img's own conversions, measure
#     -O predicts their size, and vhdiinfo / libvhdi (an independent reader)
#     read qimg's VHD and VHDX as their source;
#  3. the create options' help, defaults and refusals, and qed's refusal.
# make test runs one image per subformat; QIMG_LONG=1 every option variant.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3 vhdiinfo qimg-nbd-plugin nbdkit

M=$((1 << 20))

# ---- 1. qemu-img's images ----
mk() { # NAME FMT SIZE OPTS
    "$QEMU_IMG" create -q -f "$2" ${4:+-o "$4"} "$1" "$3" || _fail "create $1"
    "$QEMU_IO" -f "$2" -c 'write -P 0x11 0 64k' -c 'write -P 0x22 3M 1536k' \
        -c 'write -z 5M 1M' -c 'write -P 0x33 13M 512' "$1" >/dev/null
}
mk d.vpc vpc 16M ""
mk f.vpc vpc 16M "subformat=fixed"
mk s.vpc vpc 16M "force_size=on"
mk d.vhdx vhdx 16M ""
mk b.vhdx vhdx 16M "block_size=1M,log_size=2M"
mk f.vhdx vhdx 16M "subformat=fixed,block_state_zero=off"
mk n.vhdx vhdx 16M "block_state_zero=off"
mk d.vdi vdi 16M ""
mk s.vdi vdi 16M "static=on"
mk d.qed qed 16M ""
mk c.qed qed 16M "cluster_size=4k,table_size=2"

# make test: one image per subformat; QIMG_LONG=1: every option variant too
imgs="d.vpc:vpc f.vpc:vpc d.vhdx:vhdx f.vhdx:vhdx d.vdi:vdi s.vdi:vdi d.qed:qed"
[ -n "${QIMG_LONG:-}" ] && imgs="$imgs s.vpc:vpc b.vhdx:vhdx n.vhdx:vhdx c.qed:qed"
for spec in $imgs; do
    img=${spec%%:*} fmt=${spec#*:}
    all= # the human outputs, check JSON and dd: d.* images (QIMG_LONG=1: all)
    [[ -n "${QIMG_LONG:-}" || $img == d.* ]] && all=1
    same_as_qemu info -f "$fmt" --output=json "$img"
    [ -n "$all" ] && same_as_qemu info -f "$fmt" "$img"
    same_as_qemu_err check -f "$fmt" "$img"
    [ -n "$all" ] && same_as_qemu_err check -f "$fmt" --output=json "$img"
    if [ "$fmt" != vhdx ]; then
        same_as_qemu map -f "$fmt" --output=json "$img"
        [ -n "$all" ] && same_as_qemu map -f "$fmt" "$img"
    fi
    "$QEMU_IMG" convert -f "$fmt" -O raw "$img" "q-$img.raw"
    "$QIMG" convert -f "$fmt" -O raw "$img" "m-$img.raw"
    same_file "convert $img" "q-$img.raw" "m-$img.raw"
    assert_rc "compare $img with its raw copy" 0 "$QIMG" compare -f "$fmt" -F raw "$img" \
        "q-$img.raw"
    if [ -n "$all" ]; then
        "$QIMG" dd -f "$fmt" -O raw if="$img" of="dd-$img.raw" bs=1M
        same_file "dd $img" "q-$img.raw" "dd-$img.raw"
    fi
done
# VHDX: the data blocks qimg maps are the blocks written (qemu-img maps
# all of a VHDX as data: it has no block status for it)
for img in d.vhdx b.vhdx n.vhdx; do
    bs=$("$QEMU_IMG" info --output=json "$img" | python3 -c \
        'import json,sys; print(json.load(sys.stdin)["cluster-size"])')
    got=$("$QIMG" map --output=json "$img" | python3 -c '
import json, sys
bs = int(sys.argv[1])
blocks = set()
for e in json.load(sys.stdin):
    if e["data"]:
        blocks.update(range(e["start"] // bs, (e["start"] + e["length"] - 1) // bs + 1))
print(sorted(blocks))' "$bs")
    want=$(python3 -c '
import sys
bs, M = int(sys.argv[1]), 1 << 20
w = [(0, 65536), (3 * M, 1536 * 1024), (5 * M, M), (13 * M, 512)]
print(sorted(set(b for o, n in w for b in range(o // bs, (o + n - 1) // bs + 1))))' "$bs")
    assert_eq "qimg map of $img: its data blocks" "$want" "$got"
done
# compare across formats and with a VHD's geometry size (the warning)
same_as_qemu compare d.vhdx d.vdi
same_as_qemu compare -f vpc -F qed d.vpc d.qed
same_as_qemu compare f.vhdx n.vhdx

# served by `qimg nbd` (the asynchronous API under nbdkit): qemu-img reads
# each as its raw conversion, and a write through the export lands.  One
# client each (no -t): used once it listens, it ends when its client left.
srv=
trap '[ -z "$srv" ] || kill $srv 2>/dev/null; _cleanup' EXIT
serve1() { # FMT IMAGE: qimg nbd for one client on n.sock
    rm -f n.sock n.pid
    "$QIMG" nbd -f "$1" -k "$PWD/n.sock" --pid-file "$PWD/n.pid" "$2" &
    srv=$!
    nbd_listening n.sock n.pid $srv || finish
}
for spec in d.vpc:vpc d.vhdx:vhdx d.vdi:vdi; do
    img=${spec%%:*} fmt=${spec#*:}
    cp "$img" "w-$img"
    serve1 "$fmt" "w-$img"
    timeout 60 "$QEMU_IMG" convert -f raw -O raw "nbd+unix:///?socket=$PWD/n.sock" \
        "n-$img.raw"
    server_left $srv "qimg nbd"
    same_file "qimg nbd serves $img" "q-$img.raw" "n-$img.raw"
    serve1 "$fmt" "w-$img"
    timeout 60 "$QEMU_IO" -f raw -c 'write -P 0x6b 7M 300k' \
        "nbd+unix:///?socket=$PWD/n.sock" >/dev/null
    server_left $srv "qimg nbd"
    srv=
    assert_rc "a write through qimg nbd into $img" 0 "$QEMU_IO" -f "$fmt" -r \
        -c 'read -P 0x6b 7M 300k' -c 'read -P 0x22 3M 1536k' "w-$img"
done

# ---- 2. qimg's images ----
head -c $((3 * M)) /dev/urandom >src.raw
truncate -s $((9 * M)) src.raw
head -c $((512 * 1024)) /dev/urandom | dd of=src.raw bs=512k seek=14 conv=notrunc 2>/dev/null
truncate -s $((20 * M)) src.raw
conv() { # NAME FMT OPTS: qimg's and qemu-img's conversion of src.raw
    "$QIMG" convert -f raw -O "$2" ${3:+-o "$3"} src.raw "m-$1" || _fail "qimg convert $1"
    "$QEMU_IMG" convert -f raw -O "$2" ${3:+-o "$3"} src.raw "q-$1" || _fail "qemu convert $1"
}
specs=("a.vpc vpc" "b.vpc vpc subformat=fixed" "c.vpc vpc subformat=fixed,force_size"
    "a.vhdx vhdx" "b.vhdx vhdx subformat=fixed" "d.vhdx vhdx block_size=2M,log_size=3M"
    "a.vdi vdi" "b.vdi vdi static=on")
[ -n "${QIMG_LONG:-}" ] && specs+=("d.vpc vpc force_size"
    "c.vhdx vhdx subformat=fixed,block_state_zero=off" "e.vhdx vhdx block_state_zero=off")
for spec in "${specs[@]}"; do
    read -r name fmt opts <<<"$spec"
    conv "$name" "$fmt" "$opts"
    "$QEMU_IMG" convert -f "$fmt" -O raw "m-$name" "back-$name.raw"
    truncate -s $((20 * M)) "back-$name.raw" # a VHD's geometry may add a tail of zeros
    same_file "qemu-img reads qimg's $name" src.raw "back-$name.raw"
    case $fmt in vdi | vhdx)
        assert_rc "qemu-img check of qimg's $name" 0 "$QEMU_IMG" check -f "$fmt" "m-$name" ;;
    esac
    same_as_qemu info -f "$fmt" --output=json "m-$name"
    assert_eq "file length of $name as qemu-img's" "$(stat -c %s "q-$name")" \
        "$(stat -c %s "m-$name")"
    # measure -O predicts what convert made
    req=$("$QIMG" measure -f raw -O "$fmt" ${opts:+-o "$opts"} --output=json src.raw |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["required"])')
    case "$name" in b.vhdx) ;; # qemu-img's ZERO blocks: writes land past the data area
    *) assert_eq "measure -O $fmt $opts: required" "$(stat -c %s "m-$name")" "$req" ;;
    esac
done
# create, then qemu-io writes into qimg's images and qimg reads them back
for spec in "vpc 10M" "vpc 10M subformat=fixed" "vhdx 10M" "vhdx 10M subformat=fixed" \
    "vdi 10M" "vdi 10M static=on"; do
    read -r fmt size opts <<<"$spec"
    rm -f n.img
    "$QIMG" create -q -f "$fmt" ${opts:+-o "$opts"} n.img "$size"
    "$QEMU_IO" -f "$fmt" -c 'write -P 0x5a 1M 100k' n.img >/dev/null
    assert_rc "qimg reads what qemu-io wrote into qimg's $fmt $opts" 0 \
        "$QIMG" io -f "$fmt" -c 'read -P 0x5a 1M 100k' -c 'read -P 0 0 1M' n.img
done

# the independent reader: vhdiinfo's view, libvhdi's bytes
for name in a.vpc b.vpc c.vpc a.vhdx b.vhdx d.vhdx; do
    got=$(vhdiinfo "m-$name" | grep -E "Disk type|Media size|Format" | sed 's/\t//g')
    want=$(vhdiinfo "q-$name" | grep -E "Disk type|Media size|Format" | sed 's/\t//g')
    assert_eq "vhdiinfo of qimg's $name as of qemu-img's" "$want" "$got"
done
if /usr/bin/python3 -c 'import pyvhdi' 2>/dev/null; then
    _checks=$((_checks + 5))
    bad=$(/usr/bin/python3 - src.raw m-a.vpc m-c.vpc m-a.vhdx m-b.vhdx m-d.vhdx <<'PY'
import pyvhdi, sys
src = open(sys.argv[1], "rb").read()
for name in sys.argv[2:]:
    f = pyvhdi.file()
    f.open(name)
    if f.read_buffer_at_offset(len(src), 0) != src:
        print(name)
    f.close()
PY
    )
    [ $? = 0 ] && [ -z "$bad" ] || _fail "libvhdi does not read qimg's ${bad:-images}"
elif in_ci; then
    _checks=$((_checks + 1))
    _fail "python3-libvhdi is not installed (CI=true)"
fi

# ---- 3. options ----
for fmt in vpc vhdx vdi qed; do
    same_as_qemu create -f "$fmt" -o help
done
for o in "subformat=bogus" "subformat=fixed,force_size=on" "force_size=off"; do
    same_as_qemu_err create -f vpc -o "$o" o.vpc 100M
done
for o in "block_size=3M" "log_size=0" "block_size=0" "block_size=512M" "log_size=5000000"; do
    rm -f o.vhdx
    same_as_qemu_err create -f vhdx -o "$o" o.vhdx 100M
done
same_as_qemu_err create -f vhdx o.vhdx 65T
same_as_qemu_err create -f vdi -o static=on o.vdi 100M
same_as_qemu_err create -f vpc o.vpc 2041G
# qed: qimg does not create it (README); the option list is qemu-img's
_checks=$((_checks + 1))
if ! "$QIMG" create -q -f qed n.qed 1M 2>&1 | grep -q "qimg does not create QED images"; then
    _fail "create -f qed names the refusal"
fi

finish
