#!/bin/bash
# qimg convert's parallel pipeline (api/copy.c) against qemu-img convert:
#  - -m 1, the default, -m 16, -W, -S 0, -c, cache=none on both sides, small
#    clusters, extended L2: the copy equals the source (qemu-img compare),
#    qemu-img check is clean, the allocation map is qemu-img's;
#  - host clusters in guest order (copy.c invariant 1): with and without
#    -W the output is no more fragmented than qemu-img's default convert;
#  - faults in the source's reads and the target's writes at many points
#    end in a clean error naming the offset, never a hang (copy.c
#    invariant 3);
#  - SIGUSR1 prints the progress line, SIGINT stops the copy with an error;
#  - memory stays bounded with -m 16 and -c on every core.
# make test: every variant from the raw source (the compressed ones, -c,
# from csrc.raw: the raw source's layout at a quarter of its size, 160
# clusters, ten times the requests in flight; deflating 40 MiB took 0.6 s
# of CPU a run, and -c runs five times), a quarter of them from the qcow2
# one, 4 fault points, a 128 MiB source for the memory bound (-c: 32 MiB,
# its bound 16 MiB, as its requests hold a cluster each, not 2 MiB);
# QIMG_LONG=1: every variant on both full-size sources, 7 fault points,
# 1 GiB (-c too, with the 64 MiB bound).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3

# A 40 MiB + 512 source: random data, explicit zeros, a hole, data with
# zero runs of several lengths, and an unaligned tail; csrc.raw the same
# at a quarter of the size (the zero runs as they are, but the 2 MiB one
# at 1 MiB).
python3 - <<'PY'
import random
random.seed(20261201)
def rnd(n):
    return random.getrandbits(8 * n).to_bytes(n, 'little')
for name, q in (('src.raw', 4), ('csrc.raw', 1)):
    M = q << 18  # a quarter of a MiB per q
    with open(name, 'wb') as f:
        f.truncate(40 * M + 512)
        f.seek(0); f.write(rnd(8 * M))
        f.seek(8 * M); f.write(b'\0' * (4 * M))
        blk = bytearray(rnd(8 * M))
        for z in [512, 4096, 65536, 1536, 131072, 4096 * 3, min(2 << 20, 4 * M)]:
            o = random.randrange(0, len(blk) - z)
            blk[o:o + z] = b'\0' * z
        f.seek(20 * M); f.write(bytes(blk))
        f.seek(28 * M); f.write(rnd(12 * M + 512))
PY
"$QEMU_IMG" create -q -f qcow2 base.qcow2 40M
"$QEMU_IO" -c 'write -P 0x11 0 24M' base.qcow2 >/dev/null
"$QEMU_IMG" create -q -f qcow2 -b base.qcow2 -F qcow2 src.qcow2 40M
"$QEMU_IO" -c 'write -P 0x22 1M 3M' -c 'write -z 6M 2M' -c 'write -P 0x33 20M 10M' \
    -c 'write -c -P 0x44 35M 1M' src.qcow2 >/dev/null

# fragmented IMG: the fragmented-clusters of qemu-img check --output=json
# (which must find IMG clean: 0 when it does not).
# (read by the shell, not sed and grep: a process costs ~8 ms of CPU)
fragmented() {
    "$QEMU_IMG" check --output=json "$1" >check.json 2>&1 || return 1
    local l
    while IFS= read -r l; do
        [[ "$l" =~ \"fragmented-clusters\":\ ([0-9]*) ]] && [ -n "${BASH_REMATCH[1]}" ] &&
            echo "${BASH_REMATCH[1]}" && return 0
    done <check.json
    echo 0
}

# maps_same DESC A B: qemu-img's allocation maps of A and B are the same,
# adjacent extents with the same flags merged, host offsets left out (see
# map_flags in common.sh).  Here the maps are kept (maps/N.a, maps/N.b) and
# compared by maps_compared, one python3 for all (~40 ms of CPU a start).
mkdir maps
nmaps=0
maps_same() {
    nmaps=$((nmaps + 1))
    printf '%s\n' "$1" >maps/$nmaps.desc
    "$QEMU_IMG" map -f qcow2 --output=json "$2" >maps/$nmaps.a 2>&1
    echo $? >maps/$nmaps.rc
    "$QEMU_IMG" map -f qcow2 --output=json "$3" >maps/$nmaps.b 2>&1
    echo $? >>maps/$nmaps.rc
}
maps_compared() {
    _checks=$((_checks + nmaps))
    python3 - "$nmaps" >maps.out 2>&1 <<'EOF'
import json, sys
def flags(path):
    out = []
    for e in json.load(open(path)):
        k = (e["depth"], e["present"], e["zero"], e["data"])
        if out and out[-1][0] == k and out[-1][1] + out[-1][2] == e["start"]:
            out[-1][2] += e["length"]
        else:
            out.append([k, e["start"], e["length"]])
    return out
for n in range(1, int(sys.argv[1]) + 1):
    desc = open("maps/%d.desc" % n).read().strip()
    try:
        if open("maps/%d.rc" % n).read().split() != ["0", "0"]:
            raise ValueError("qemu-img map failed: " + open("maps/%d.a" % n).read()
                             + open("maps/%d.b" % n).read())
        a, b = flags("maps/%d.a" % n), flags("maps/%d.b" % n)
        if a != b:
            raise ValueError("maps differ:\n%s\n%s" % (a, b))
    except Exception as e:
        print("BAD %s: map" % desc)
        print(e)
EOF
    fail_bad_lines maps.out $? "maps: python3"
}

# parallel_case SRC ARGS...: qimg and qemu-img with the same arguments.
# REF_FRAG[key]: the fragmentation of qemu-img's reference convert (below)
# for each source and arguments, made once.
declare -A REF_FRAG
parallel_case() {
    local src=$1 desc qf mf ref
    shift
    desc="convert $* $src"
    rm -f q.qcow2 m.qcow2 r.qcow2
    "$QEMU_IMG" convert "$@" "$src" q.qcow2 || { _fail "$desc: qemu-img failed"; return; }
    assert_rc "$desc" 0 "$QIMG" convert "$@" "$src" m.qcow2 || return
    assert_rc "$desc: same contents" 0 "$QEMU_IMG" compare "$src" m.qcow2
    _checks=$((_checks + 1))
    mf=$(fragmented m.qcow2) || { _fail "$desc: qemu-img check"; cat check.json; }
    maps_same "$desc" q.qcow2 m.qcow2
    # qemu-img's default convert (one write at a time, in order) of the
    # same source: the reference with and without -W (copy.h rule 3)
    local plain=() a skip=0
    for a in "$@"; do
        if [ $skip = 1 ]; then
            skip=0
        elif [ "$a" = -m ]; then
            skip=1
        elif [ "$a" != -W ]; then
            plain+=("$a")
        fi
    done
    ref="qemu-img ${plain[*]}"
    if [ -z "${REF_FRAG["$src $ref"]:-}" ]; then
        if [ "${plain[*]}" = "$*" ]; then
            REF_FRAG["$src $ref"]=$(fragmented q.qcow2)
        else
            "$QEMU_IMG" convert "${plain[@]}" "$src" r.qcow2
            REF_FRAG["$src $ref"]=$(fragmented r.qcow2)
        fi
    fi
    qf=${REF_FRAG["$src $ref"]}
    _checks=$((_checks + 1))
    if [ "$mf" -gt "$qf" ]; then
        _fail "$desc: $mf fragmented clusters, $ref has $qf"
    fi
}

# QIMG_LONG=1 (make check-long): every variant on both sources; make test
# runs the raw source's and a quarter of the qcow2 source's.
variants=("-m 1" "" "-m 16" "-W" "-W -m 16" "-S 0 -m 16" "-c -m 16" "-c -W"
    "-t none -T none -m 16" "-o cluster_size=4k -m 16" "-o extended_l2=on -m 16"
    "-o cluster_size=2M -m 16" "-S 64k -m 16")
for src in src.raw src.qcow2; do
    case "$src" in *.raw) f=(-f raw) ;; *) f=() ;; esac
    for i in "${!variants[@]}"; do
        if [ "$src" = src.qcow2 ] && [ -z "${QIMG_LONG:-}" ] && [ $((i % 4)) != 2 ]; then
            continue
        fi
        s=$src
        case "$src ${variants[$i]} ${QIMG_LONG:-}" in "src.raw -c "*" ") s=csrc.raw ;; esac
        # shellcheck disable=SC2086
        parallel_case "$s" "${f[@]}" -O qcow2 ${variants[$i]}
    done
done
# -B: only the top layer, the rest from the target's backing file
parallel_case src.qcow2 -O qcow2 -B base.qcow2 -F qcow2 -m 16
maps_compared
# -n into an existing raw target
"$QEMU_IMG" create -q -f raw old.raw 41M
"$QEMU_IO" -f raw -c 'write -P 0x77 0 41M' old.raw >/dev/null
assert_rc "convert -n -m 16 into a written raw file" 0 \
    "$QIMG" convert -n -m 16 -f raw -O raw src.raw old.raw
assert_rc "convert -n: the source's bytes" 0 \
    cmp -n $((40 * 1024 * 1024 + 512)) src.raw old.raw

# Faults: a source read or a target write fails at the N-th request.
nths="1 3 8 17"
[ -n "${QIMG_LONG:-}" ] && nths="1 2 3 5 8 13 17"
for nth in $nths; do
    rm -f t.qcow2
    "$QEMU_IMG" create -q -f qcow2 t.qcow2 41M
    timeout 60 "$QIMG" convert -n -m 16 -f raw -O qcow2 \
        "blkdebug:event=any,op=read,nth=$nth,once:src.raw" t.qcow2 >f.out 2>f.err
    rc=$?
    assert_eq "read fault #$nth: exit code" 1 "$rc"
    err=$(<f.err)
    [[ "$err" =~ at\ byte\ [0-9]* ]] && err=${err/"${BASH_REMATCH[0]}"/at byte N}
    assert_eq "read fault #$nth: message" \
        "qimg: error while reading at byte N: Input/output error
Could not read 'blkdebug:event=any,op=read,nth=$nth,once:src.raw': Injected error (blkdebug, none #$nth)" \
        "$err"
    assert_rc "read fault #$nth: target consistent" 0 "$QEMU_IMG" check t.qcow2
    rm -f t.qcow2
    "$QEMU_IMG" create -q -f qcow2 t.qcow2 41M
    timeout 60 "$QIMG" convert -n -m 16 -f raw -O qcow2 src.raw \
        "blkdebug:event=any,nth=$nth:t.qcow2" >f.out 2>f.err
    rc=$?
    assert_eq "write fault #$nth: exit code" 1 "$rc"
    _checks=$((_checks + 1))
    grep -q "^qimg: error while writing at byte [0-9]*: Input/output error$" f.err &&
        grep -q "Injected error" f.err ||
        _fail "write fault #$nth: message: $(cat f.err)"
    # a failed data or metadata write may leak clusters, never corrupt
    "$QEMU_IMG" check t.qcow2 >c.out 2>&1
    rc=$?
    _checks=$((_checks + 1))
    [ "$rc" = 0 ] || [ "$rc" = 3 ] || { _fail "write fault #$nth: check rc $rc"; cat c.out; }
done

# Signals: SIGUSR1 prints the progress, SIGINT stops the copy.  (The copy
# must take a while: 2 GiB, all written (-S 0) through O_DIRECT one request
# at a time, from a hole that costs nothing to make.)
truncate -s 2G big.raw
rm -f big.qcow2
"$QIMG" convert -S 0 -m 1 -t none -T none -f raw -O qcow2 big.raw big.qcow2 >sig.out 2>sig.err &
pid=$!
# (its handlers are set before it creates big.qcow2: a signal before that
# would kill it, and a loaded machine can take longer than any sleep)
for _ in $(seq 1200); do
    { [ -e big.qcow2 ] || ! kill -0 $pid 2>/dev/null; } && break
    sleep 0.05
done
kill -USR1 $pid 2>/dev/null
sleep 0.2
kill -INT $pid 2>/dev/null
timeout 30 tail --pid=$pid -f /dev/null
wait $pid
rc=$?
if grep -q "interrupted" sig.err; then
    assert_eq "SIGINT: exit code" 1 "$rc"
    assert_eq "SIGINT: message" "qimg: The copy was interrupted" "$(cat sig.err)"
    _checks=$((_checks + 1))
    grep -qE '^    \([0-9]+\.[0-9]{2}/100%\)$' sig.out || _fail "SIGUSR1: no progress line: $(cat sig.out)"
else
    # finished before the signals: then it must have succeeded
    assert_eq "convert (done before SIGINT)" "0" "$rc"
fi
rm -f big.qcow2 big.raw

# Memory: bounded by the requests in flight, not by the image (copy.c 5):
# 64 MiB at most for a source of 128 MiB of data, twice the bound (a copy
# that held the image would pass it; QIMG_LONG=1: 1 GiB).  The source's
# bytes (0x5a) written by python3 (qemu-io took 1.5 s of CPU for 256 MiB).
# -c's requests hold a cluster each (8 MiB of RSS at -m 16, against 37 MiB
# without -c): in make test its source is 32 MiB, its bound 16 MiB --
# deflating 128 MiB took 1.2 s of CPU.
msize=128
[ -n "${QIMG_LONG:-}" ] && msize=1024
python3 -c 'import sys
with open("big.raw", "wb") as f:
    block = b"\x5a" * (1 << 20)
    for _ in range(int(sys.argv[1])):
        f.write(block)' $msize
for args in "-m 16" "-c -m 16"; do
    rm -f mem.qcow2
    bound=64
    if [ "$args" = "-c -m 16" ] && [ -z "${QIMG_LONG:-}" ]; then
        truncate -s 32M big.raw
        bound=16
    fi
    # shellcheck disable=SC2086
    /usr/bin/time -f '%M' -o mem.txt "$QIMG" convert $args -f raw -O qcow2 big.raw mem.qcow2
    kib=$(tail -n 1 mem.txt)
    _checks=$((_checks + 1))
    [ "$kib" -le $((bound * 1024)) ] || _fail "convert $args: max RSS $kib KiB > $bound MiB"
done
rm -f mem.qcow2 big.raw

finish
