#!/bin/bash
# bench/qemu-savevm.sh: time QEMU 7.2's own savevm or loadvm of one image.
#
#   bench/qemu-savevm.sh [--cache MODE] [--ram-file FILE | --ram-size SIZE]
#                        [--before CMD] save|load IMAGE SNAPSHOT
#
# Starts a paused VM (qemu-system-x86_64 -machine pc,accel=tcg -S, no guest
# OS needed) whose only drive is IMAGE (qcow2, virtio, cache MODE, default
# writeback) and whose RAM is the memory backend "m": with --ram-file a
# private mapping of FILE (memory-backend-file share=off: the RAM holds the
# file's bytes, so random data makes an incompressible state), else
# anonymous memory of SIZE (default 1G; memory-backend-ram, for loading a
# state saved with --ram-file of the same size).  When QMP is up it runs
# CMD (bash -c; e.g. memwarm, dropping caches), then sends HMP "savevm
# SNAPSHOT" or "loadvm SNAPSHOT" through QMP and measures the wall time
# from the request to the reply (savevm includes QEMU's flush and the
# snapshot creation), plus a sync right after.  Prints the seconds on
# stdout.  Fails (rc 1) with QEMU's message when the HMP reply is not empty
# (HMP reports errors as text), or when QEMU is missing or dies.
set -u

cache=writeback
ram_file=
ram_size=1G
before=
while [ $# -gt 0 ]; do
    case $1 in
    --cache) cache=$2; shift 2 ;;
    --ram-file) ram_file=$2; shift 2 ;;
    --ram-size) ram_size=$2; shift 2 ;;
    --before) before=$2; shift 2 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) break ;;
    esac
done
if [ $# -ne 3 ] || { [ "$1" != save ] && [ "$1" != load ]; }; then
    sed -n '3,5p' "$0" >&2
    exit 2
fi
op=$1
image=$2
snapshot=$3
QEMU_SYSTEM=${QEMU_SYSTEM:-qemu-system-x86_64}
command -v "$QEMU_SYSTEM" >/dev/null || { echo "$QEMU_SYSTEM not found" >&2; exit 1; }

if [ -n "$ram_file" ]; then
    bytes=$(stat -c %s "$ram_file") || exit 1
    ram_size=$((bytes >> 20))M # -m without a suffix means MiB
    mem=(-object "memory-backend-file,id=m,size=$ram_size,mem-path=$ram_file,share=off")
else
    mem=(-object "memory-backend-ram,id=m,size=$ram_size")
fi

dir=$(mktemp -d) || exit 1
sock=$dir/qmp.sock
qemu_pid=
cleanup() {
    if [ -n "$qemu_pid" ] && kill -0 "$qemu_pid" 2>/dev/null; then
        kill "$qemu_pid" 2>/dev/null
        wait "$qemu_pid" 2>/dev/null
    fi
    rm -rf "$dir"
}
trap cleanup EXIT

"$QEMU_SYSTEM" -machine pc,accel=tcg,memory-backend=m -m "$ram_size" "${mem[@]}" \
    -nographic -nodefaults -S -monitor none -serial none \
    -drive "file=$image,format=qcow2,if=virtio,cache=$cache" \
    -qmp "unix:$sock,server=on,wait=off" >"$dir/qemu.log" 2>&1 &
qemu_pid=$!

python3 - "$sock" "${op}vm $snapshot" "$before" "$qemu_pid" <<'PY'
import json, os, socket, subprocess, sys, time

sock_path, cmdline, before, pid = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
s = socket.socket(socket.AF_UNIX)
deadline = time.monotonic() + 30
while True:
    try:
        s.connect(sock_path)
        break
    except OSError:
        try:
            os.kill(pid, 0)
        except OSError:
            sys.exit("QEMU exited before QMP came up")
        if time.monotonic() > deadline:
            sys.exit("QMP did not come up in 30 s")
        time.sleep(0.05)
f = s.makefile("rw")

def recv():
    while True:
        line = f.readline()
        if not line:
            sys.exit("QEMU closed the QMP connection")
        m = json.loads(line)
        if "event" not in m:
            return m

def send(cmd, args=None):
    msg = {"execute": cmd}
    if args is not None:
        msg["arguments"] = args
    f.write(json.dumps(msg) + "\n")
    f.flush()
    return recv()

recv()  # greeting
send("qmp_capabilities")
if before:
    subprocess.run(["bash", "-c", before], check=True)
t0 = time.monotonic()
r = send("human-monitor-command", {"command-line": cmdline})
subprocess.run(["sync"], check=True)
t1 = time.monotonic()
out = r.get("return", r)
if out != "":
    print("QEMU %s: %s" % (cmdline, str(out).strip()), file=sys.stderr)
    send("quit")
    sys.exit(1)
print("%.3f" % (t1 - t0))
try:
    send("quit")
except SystemExit:
    pass
PY
rc=$?
wait "$qemu_pid" 2>/dev/null
qemu_pid=
if [ $rc -ne 0 ]; then
    sed 's/^/qemu: /' "$dir/qemu.log" >&2
fi
exit $rc
