#!/bin/bash
# The qcow2 read path against qemu-img, across the matrix of images that
# qemu-img and qemu-io write: compat 0.10/1.1, cluster sizes 512..2M,
# refcount widths 1..64, zlib/zstd compression, extended L2 with
# subcluster-granular writes, backing chains (raw and qcow2 bases, shorter
# bases), zero and discarded clusters, internal snapshots, external data
# files (raw and not), preallocation, grown and shrunk images.
#
# For every image:
#   - qimg convert -O raw equals qemu-img convert -O raw byte for byte, and
#     so does convert -l for every internal snapshot (by ID and by name);
#   - qimg map --output=json and human map equal qemu-img's exactly (the
#     files settled first: common.sh's settle);
#   - qimg info --output=json (and --backing-chain) equals qemu-img's
#     exactly.
# make test runs a sample of the cluster sizes (smallest, default,
# largest and six between), refcount widths (1, 4, 16, 64) and of the
# compression settings (each cluster size with one type), and leaves the
# human map and info --backing-chain out for the members of a matrix whose
# other members run them (check_image's "lite"), and info --backing-chain
# for images without a backing file but the first; QIMG_LONG=1 runs it all.
# The maps run at the end (or before an image changes), after one settle
# of all the files (one python3 start instead of one per image).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io cmp python3 numfmt

KiB=1024
MiB=$((1024 * 1024))

# Incompressible data for qemu-io "write -s" and for raw sources.
head -c $((4 * MiB)) /dev/urandom >rand.bin
# Compressible data (text with runs), also for raw sources.
yes 'qimg reads what qemu-img writes, 0123456789abcdef' | head -c $((4 * MiB)) >text.bin

# qio IMG CMD...: run qemu-io commands on IMG (one process), quietly.
# qi ARGS...: qemu-img, which must succeed (setup).
# scribble IMG SIZE: data at varied offsets, unaligned and crossing cluster
# boundaries, the last byte of the disk, then zeroes and discards over some
# of it.  SIZE is the virtual size in bytes (at least 3 MiB).
scribble() {
    local img=$1 size=$2
    qio "$img" \
        "write -q -s rand.bin 0 1000" \
        "write -q -P 0x11 4000 200" \
        "write -q -s rand.bin 65000 70000" \
        "write -q -P 0x22 $((MiB + 512)) $((64 * KiB + 7))" \
        "write -q -s rand.bin $((2 * MiB - 3000)) 9000" \
        "write -q -P 0x33 $((size - 700)) 700" \
        "write -q -z $((MiB + 4096)) 8192" \
        "write -q -z -u $((2 * MiB - 65536)) 65536" \
        "discard -q $((2 * MiB)) 65536" \
        "write -q -P 0x44 $((2 * MiB + 100)) 300"
}

# conv_same IMG Q-RAW [ARGS...]: qimg convert -O raw ARGS IMG equals Q-RAW
# (qemu-img's; the raw images are a few MiB: cmp).
conv_same() {
    local img=$1 want=$2
    shift 2
    : >m.raw # (emptied by the shell, not removed by rm: a process saved)
    "$QIMG" convert -O raw "$@" "$img" m.raw >.m.out 2>&1
    M_RC=$?
    _checks=$((_checks + 1))
    if [ "$M_RC" != 0 ]; then
        _fail "$img: qimg convert -O raw $* exited $M_RC"
        head -n 5 .m.out
    elif ! cmp -s "$want" m.raw; then
        _fail "$img: qimg convert -O raw $* differs from qemu-img's"
    fi
}

# check_image IMG [lite]: convert (active layer and every snapshot), map
# and info of IMG must equal qemu-img's.  "lite" (a member of a matrix
# whose other members run everything; not with QIMG_LONG=1): convert,
# info and map --output=json only, not the human map nor info
# --backing-chain.  The converts and info run now; the maps and info
# --backing-chain are queued (to_map) for map_checks; make test runs info
# --backing-chain only where there is a backing file (and on the first
# image).
to_map=()
check_image() {
    local img=$1 id name l line in=0 ids=() names=() i info
    : >q.raw
    qi convert -O raw "$img" q.raw
    conv_same "$img" q.raw
    same_as_qemu info --output=json "$img" || echo "  (image: $img)"
    # Internal snapshots (the ID and name of each in the JSON qemu-img's
    # info just printed, read by the shell): by ID, by name and with
    # snapshot.id=,snapshot.name=; qemu-img converts each one once.
    while IFS= read -r line; do
        case $line in
        '    "snapshots": [') in=1 ;;
        '    ]'*) in=0 ;;
        '            "id": "'*) id=${line#*: \"} && id=${id%,} && id=${id%\"} ;;
        '            "name": "'*) name=${line#*: \"} && name=${name%,} && name=${name%\"} ;;
        '        }'*) [ $in = 1 ] && ids+=("$id") && names+=("$name") ;;
        esac
    done <.q.out
    for i in "${!ids[@]}"; do
        id=${ids[i]} name=${names[i]}
        : >q.raw
        qi convert -O raw -l "$id" "$img" q.raw
        for l in "$id" "$name" "snapshot.id=$id,snapshot.name=$name"; do
            conv_same "$img" q.raw -l "$l"
        done
    done
    : >q.raw
    : >m.raw
    # (chain: info --backing-chain, which adds to info what the backing
    # files say: make test runs it on images with a backing file, and on
    # the first image for the chain of one)
    local chain=
    IFS= read -r -d '' info <.q.out
    [ -z "$chained" ] || [ -n "${QIMG_LONG:-}" ] || [[ "$info" == *'"backing-filename"'* ]] ||
        chain=no
    chained=yes
    to_map+=("$img ${2:-full} $chain")
}
chained=

# map_checks: the queued maps: map --output=json of each image, and but
# for "lite" ones the human map and info --backing-chain.  The converts
# cached pages of the files' unwritten extents, which a map reads as data
# until they are evicted: settled first, once for all images (one python3
# start; an image queued here is not written again but where map_checks
# runs before).
map_checks() {
    local img lite chain
    settle ./*
    for img in "${to_map[@]}"; do
        read -r img lite chain <<<"$img"
        same_as_qemu map --output=json "$img" || echo "  (image: $img)"
        [ "$lite" = lite ] && [ -z "${QIMG_LONG:-}" ] && continue
        # Human map (qemu-img refuses compressed clusters and data files:
        # the exit code must agree then too).
        same_as_qemu map "$img" || echo "  (image: $img)"
        [ "$chain" = no ] && continue
        same_as_qemu info --output=json --backing-chain "$img" || echo "  (image: $img)"
    done
    to_map=()
}

SIZE=$((5 * MiB + 4321 * 512))

# --- compat 0.10 and 1.1, the cluster sizes, default everything else
# (make test: the smallest, the default and the largest for both, six more
# for 1.1, lite; QIMG_LONG=1: every size for both).
for compat in 0.10 1.1; do
    for cs in 512 1k 2k 4k 8k 16k 32k 64k 128k 256k 512k 1M 2M; do
        lite=
        case $compat-$cs in
        *-512 | *-64k | *-2M) ;;
        1.1-1k | 1.1-4k | 1.1-16k | 1.1-128k | 1.1-512k | 1.1-1M) lite=lite ;;
        *) [ -n "${QIMG_LONG:-}" ] || continue ;;
        esac
        img=c$compat-$cs.qcow2
        qi create -f qcow2 -o compat=$compat,cluster_size=$cs "$img" $SIZE
        scribble "$img" $SIZE
        check_image "$img" $lite
    done
done

# --- refcount widths (1 bit: every cluster referenced once, so no
# snapshots; wider ones get a snapshot so refcounts above 1 exist; make
# test: 1, 4, 16 and 64, QIMG_LONG=1: every width).
for rb in 1 2 4 8 16 32 64; do
    case $rb in 2 | 8 | 32) [ -n "${QIMG_LONG:-}" ] || continue ;; esac
    img=rb$rb.qcow2
    qi create -f qcow2 -o refcount_bits=$rb,cluster_size=4k "$img" $SIZE
    scribble "$img" $SIZE
    if [ $rb -gt 1 ]; then
        qi snapshot -c snap "$img"
        qio "$img" "write -q -P 0x55 0 12k"
    fi
    check_image "$img" lite
done

# --- compression: convert -c from a mixed raw source (compressible text,
# random data, zeros, holes), with both compression types and a few cluster
# sizes, plus compressed writes from qemu-io over uncompressed data.
truncate -s $SIZE mixed.raw
dd if=text.bin of=mixed.raw bs=64k count=16 conv=notrunc status=none
dd if=rand.bin of=mixed.raw bs=64k seek=20 count=5 conv=notrunc status=none
dd if=text.bin of=mixed.raw bs=4k seek=$((3 * MiB / 4096)) skip=5 count=77 conv=notrunc status=none
dd if=/dev/zero of=mixed.raw bs=64k seek=40 count=4 conv=notrunc status=none
dd if=text.bin of=mixed.raw bs=1 seek=$((SIZE - 333)) count=333 conv=notrunc status=none
# (make test: each cluster size with one of the types, QIMG_LONG=1: both)
for ct in zlib zstd; do
    for cs in 512 4k 64k 2M; do
        case $ct-$cs in zlib-4k | zlib-2M | zstd-512 | zstd-64k)
            [ -n "${QIMG_LONG:-}" ] || continue ;;
        esac
        img=comp-$ct-$cs.qcow2
        qi convert -c -O qcow2 -o compression_type=$ct,cluster_size=$cs mixed.raw "$img"
        check_image "$img"
    done
    img=compw-$ct.qcow2
    qi create -f qcow2 -o compression_type=$ct "$img" $SIZE
    # (qemu-io writes compressed clusters only where nothing is allocated.)
    qio "$img" "write -q -P 0x66 0 1M" "write -q -c -s text.bin $((MiB + 64 * KiB)) 64k" \
        "write -q -c -s rand.bin $((MiB + 256 * KiB)) 64k" "write -q -c -P 0 $((3 * MiB)) 64k" \
        "write -q -c -s text.bin $((4 * MiB)) 64k"
    qi snapshot -c s1 "$img"
    # After the snapshot, the shared compressed cluster is rewritten by a
    # plain write (copy-on-write of a compressed cluster).
    qio "$img" "write -q -P 0x68 $((4 * MiB + 7000)) 5"
    check_image "$img"
done
# compat=0.10 images can hold compressed clusters too.
qi convert -c -O qcow2 -o compat=0.10 mixed.raw comp-v2.qcow2
check_image comp-v2.qcow2

# --- extended L2: subcluster-granular data, zeroes and discards, alone and
# over a backing file (unallocated subclusters read through).
for cs in 16k 64k 2M; do
    sc=$(($(numfmt --from=iec ${cs^^}) / 32))
    img=xl2-$cs.qcow2
    qi create -f qcow2 -o extended_l2=on,cluster_size=$cs "$img" $SIZE
    scribble "$img" $SIZE
    qio "$img" "write -q -P 0x71 $sc $sc" "write -q -P 0x72 $((5 * sc + 1)) $((3 * sc))" \
        "write -q -z $((6 * sc)) $sc" "write -q -P 0x73 $((32 * sc + 31 * sc)) $sc" \
        "write -q -z -u $((3 * MiB)) $((2 * sc))" "discard -q $((3 * MiB + 4 * sc)) $sc"
    check_image "$img"
done
qi convert -O raw mixed.raw xbase.raw
qi create -f qcow2 -o extended_l2=on,cluster_size=64k -b xbase.raw -F raw xl2-top.qcow2 $SIZE
qio xl2-top.qcow2 "write -q -P 0x74 2048 2048" "write -q -P 0x75 $((64 * KiB + 30 * 2048)) 6000" \
    "write -q -z 8192 4096" "discard -q $((1024 * KiB)) 64k" "write -q -z $((1024 * KiB + 64 * KiB + 2048)) 2048"
check_image xl2-top.qcow2
map_checks # (before the image changes)
qi snapshot -c xs xl2-top.qcow2
qio xl2-top.qcow2 "write -q -P 0x76 0 1000"
check_image xl2-top.qcow2

# --- backing chains.
# raw base <- qcow2 top.
truncate -s $SIZE base.raw
dd if=rand.bin of=base.raw bs=4k count=300 conv=notrunc status=none
dd if=text.bin of=base.raw bs=4k seek=1000 count=100 conv=notrunc status=none
qi create -f qcow2 -b base.raw -F raw top-raw.qcow2
scribble top-raw.qcow2 $SIZE
check_image top-raw.qcow2
# qcow2 base <- qcow2 top.
qi create -f qcow2 -o cluster_size=4k b2.qcow2 $SIZE
qio b2.qcow2 "write -q -s rand.bin 0 3M" "write -q -P 0x81 $((4 * MiB)) 1M"
qi create -f qcow2 -b b2.qcow2 -F qcow2 top2.qcow2
scribble top2.qcow2 $SIZE
check_image top2.qcow2
# Chain of 3: qcow2 base <- qcow2 mid (other cluster size) <- qcow2 top.
qi create -f qcow2 -o cluster_size=16k -b b2.qcow2 -F qcow2 mid3.qcow2
qio mid3.qcow2 "write -q -P 0x91 100000 300000" "write -q -z $((3 * MiB + 5000)) 100000" \
    "discard -q $((4 * MiB)) 64k"
qi create -f qcow2 -o cluster_size=512 -b mid3.qcow2 -F qcow2 top3.qcow2
qio top3.qcow2 "write -q -P 0x92 200000 5000" "write -q -z 120000 8192"
check_image top3.qcow2
# Chain of 3 with a raw base.
qi create -f qcow2 -b base.raw -F raw mid3r.qcow2
qio mid3r.qcow2 "write -q -P 0x93 $((2 * MiB)) 100000"
qi create -f qcow2 -b mid3r.qcow2 -F qcow2 top3r.qcow2 $((SIZE + 3 * MiB))
qio top3r.qcow2 "write -q -P 0x94 $((SIZE + MiB)) 1000"
check_image top3r.qcow2
# Bases shorter than the top (the tail reads as zeros), raw and qcow2, and
# a base whose size is not a multiple of the cluster size.
head -c $((MiB + 1234)) rand.bin >short.raw
qi create -f qcow2 -b short.raw -F raw top-short-raw.qcow2 $SIZE
qio top-short-raw.qcow2 "write -q -P 0xa1 $((MiB - 100)) 50" "write -q -P 0xa2 $((3 * MiB)) 5000"
check_image top-short-raw.qcow2
qi create -f qcow2 -o cluster_size=64k shortq.qcow2 $((MiB + 1536))
qio shortq.qcow2 "write -q -s rand.bin 0 $((MiB + 1536))"
qi create -f qcow2 -b shortq.qcow2 -F qcow2 top-short-q.qcow2 $SIZE
qio top-short-q.qcow2 "write -q -P 0xa3 $((MiB + 1024)) 2000"
check_image top-short-q.qcow2
# A top that was created small and grown over a longer base.
qi create -f qcow2 -b b2.qcow2 -F qcow2 top-grown.qcow2 2M
qio top-grown.qcow2 "write -q -P 0xa4 $((MiB)) 4096"
qi resize top-grown.qcow2 $((SIZE + MiB))
check_image top-grown.qcow2
# A top without a backing format (the base is probed), as older QEMU wrote
# them: qemu-img 7.2 refuses to make one, so drop the backing format header
# extension from a fresh image.
qi create -f qcow2 -b b2.qcow2 -F qcow2 top-probe.qcow2
qio top-probe.qcow2 "write -q -P 0xa5 $((MiB)) 4096"
python3 - top-probe.qcow2 <<'PY' || exit 1
import struct, sys
with open(sys.argv[1], 'r+b') as f:
    hdr = f.read(4096)
    version = struct.unpack('>I', hdr[4:8])[0]
    start = struct.unpack('>I', hdr[100:104])[0] if version >= 3 else 72
    pos, keep = start, b''
    while True:
        typ, ln = struct.unpack('>II', hdr[pos:pos + 8])
        if typ == 0:
            break
        ext = hdr[pos:pos + 8 + ((ln + 7) & ~7)]
        if typ != 0xE2792ACA:
            keep += ext
        pos += len(ext)
    f.seek(start)
    f.write(keep + b'\0' * (pos + 8 - start - len(keep)))
PY
check_image top-probe.qcow2

# --- zero and discarded clusters, v2 and v3, over a backing file and not.
for compat in 0.10 1.1; do
    img=zero-$compat.qcow2
    qi create -f qcow2 -o compat=$compat -b b2.qcow2 -F qcow2 "$img"
    qio "$img" "write -q -P 0xb1 0 2M" "write -q -z 64k 128k" "write -q -z -u 512k 64k" \
        "discard -q 1M 64k" "write -q -z $((3 * MiB)) 1M" "write -q -z 100 1000" \
        "discard -q $((4 * MiB + 65536)) 131072"
    check_image "$img"
    img=zero-nb-$compat.qcow2
    qi create -f qcow2 -o compat=$compat "$img" $SIZE
    qio "$img" "write -q -P 0xb2 0 3M" "write -q -z 64k 128k" "write -q -z -u 512k 64k" \
        "discard -q 1M 64k" "write -q -z $((4 * MiB)) 1M"
    check_image "$img"
done

# --- internal snapshots, several, with writes in between, one of them
# taken at a different disk size.
qi create -f qcow2 snaps.qcow2 $SIZE
qio snaps.qcow2 "write -q -P 0xc1 0 1M"
qi snapshot -c first snaps.qcow2
qio snaps.qcow2 "write -q -P 0xc2 512k 1M" "write -q -z 0 64k"
qi snapshot -c second snaps.qcow2
qio snaps.qcow2 "discard -q 0 2M" "write -q -P 0xc3 3M 10000"
qi snapshot -c 'with space' snaps.qcow2
qi resize snaps.qcow2 $((SIZE + 2 * MiB))
qio snaps.qcow2 "write -q -P 0xc4 $((SIZE + MiB)) 4096"
qi snapshot -c bigger snaps.qcow2
qi snapshot -d second snaps.qcow2
qio snaps.qcow2 "write -q -P 0xc5 100 100"
check_image snaps.qcow2
# Snapshots in a v2 image and in an image with a backing file.
qi create -f qcow2 -o compat=0.10 snaps-v2.qcow2 $SIZE
qio snaps-v2.qcow2 "write -q -P 0xc6 0 1M"
qi snapshot -c a snaps-v2.qcow2
qio snaps-v2.qcow2 "write -q -P 0xc7 64k 64k"
qi snapshot -c b snaps-v2.qcow2
qio snaps-v2.qcow2 "write -q -z 0 128k"
check_image snaps-v2.qcow2
qi create -f qcow2 -b b2.qcow2 -F qcow2 snaps-b.qcow2
qio snaps-b.qcow2 "write -q -P 0xc8 100000 100"
qi snapshot -c s snaps-b.qcow2
qio snaps-b.qcow2 "write -q -z 0 1M"
check_image snaps-b.qcow2

# --- external data files.
for raw in off on; do
    img=df-$raw.qcow2
    qi create -f qcow2 -o data_file=df-$raw.data,data_file_raw=$raw "$img" $SIZE
    scribble "$img" $SIZE
    check_image "$img"
done
# data_file_raw=on with the data written to the data file directly.
qi create -f qcow2 -o data_file=dfd.data,data_file_raw=on dfd.qcow2 $SIZE
dd if=rand.bin of=dfd.data bs=64k seek=7 count=3 conv=notrunc status=none
check_image dfd.qcow2
# A data file and a backing file.
qi create -f qcow2 -o data_file=dfb.data -b b2.qcow2 -F qcow2 dfb.qcow2
qio dfb.qcow2 "write -q -P 0xd1 1000 100000" "write -q -z $((4 * MiB)) 64k"
check_image dfb.qcow2

# --- preallocation.
for p in metadata falloc full; do
    img=prealloc-$p.qcow2
    qi create -f qcow2 -o preallocation=$p "$img" $SIZE
    qio "$img" "write -q -P 0xe1 70000 100" "write -q -z $((MiB)) 64k"
    check_image "$img"
    img=prealloc-$p-512.qcow2
    qi create -f qcow2 -o preallocation=$p,cluster_size=512 "$img" $((2 * MiB + 1000))
    check_image "$img" lite
done
qi create -f qcow2 -o preallocation=metadata,data_file=pdf.data pdf.qcow2 $SIZE
check_image pdf.qcow2

# --- resized images: grown (plain and with preallocation), shrunk.
qi create -f qcow2 grow.qcow2 3M
scribble grow.qcow2 $((3 * MiB))
qi resize grow.qcow2 $((SIZE + 777 * 512))
qio grow.qcow2 "write -q -P 0xf1 $((SIZE)) 4096"
check_image grow.qcow2
qi create -f qcow2 -o cluster_size=512 grow512.qcow2 3M
scribble grow512.qcow2 $((3 * MiB))
qi resize --preallocation=falloc grow512.qcow2 +$((3 * MiB))
check_image grow512.qcow2
qi create -f qcow2 shrink.qcow2 $SIZE
scribble shrink.qcow2 $SIZE
qi resize --shrink shrink.qcow2 $((3 * MiB - 512))
check_image shrink.qcow2
qi create -f qcow2 -o cluster_size=2M shrink2m.qcow2 $SIZE
scribble shrink2m.qcow2 $SIZE
qi resize --shrink shrink2m.qcow2 $((2 * MiB + 512))
check_image shrink2m.qcow2

# --- lazy refcounts (cleanly closed) and an empty image.
qi create -f qcow2 -o lazy_refcounts=on lazy.qcow2 $SIZE
scribble lazy.qcow2 $SIZE
check_image lazy.qcow2
qi create -f qcow2 empty.qcow2 0
check_image empty.qcow2
map_checks

finish
