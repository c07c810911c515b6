#!/bin/bash
# The iotests' reader of image locks (common.sh lock_bytes,
# iotests/ofd_locks.py), which iotest 025 compares qimg's locks with
# QEMU's by:
#  - against one holder of bytes 100 201 203, while another process takes
#    and drops locks on other files as the images of the tests running
#    beside it do, every reading is 100 201 203.  Read from /proc/locks (as
#    025 did, proc_locks), about one reading in ten here listed a byte twice
#    or missed one ("100 100 201 201 203": 025 failed so once in a loaded
#    run): /proc/locks comes a page per read(), and each read() walks the
#    machine's list of locks again to the place the last one stopped, a
#    place the other processes move meanwhile;
#  - a lock to the end of the file and a run of bytes read as such, two
#    holders of a byte as one byte, no lock as nothing.
. "${0%/*}/../common.sh"
requires python3

# lockers.py FILE START,LEN...: hold OFD read locks on FILE (LEN 0: to the
# end of the file) until killed; "held" on stdout once they are.
# lockers.py --churn N: on N files of its own, take and drop the locks of a
# read-write QEMU (100 101 103 201 203), over and over.
cat >lockers.py <<'EOF'
import fcntl, os, struct, sys, time
def lock(fd, typ, start, length):
    fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("hhqqi4x", typ, 0, start, length, 0))
if sys.argv[1] == "--churn":
    fds = [os.open("churn.%d" % i, os.O_RDWR | os.O_CREAT, 0o644)
           for i in range(int(sys.argv[2]))]
    while True:
        for typ in (fcntl.F_RDLCK, fcntl.F_UNLCK):
            for fd in fds:
                for b in (100, 101, 103, 201, 203):
                    lock(fd, typ, b, 1)
            time.sleep(0.0002)
fd = os.open(sys.argv[1], os.O_RDONLY)
for r in sys.argv[2:]:
    start, length = map(int, r.split(","))
    lock(fd, fcntl.F_RDLCK, start, length)
print("held", flush=True)
time.sleep(3600)
EOF

PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null; _cleanup' EXIT
# hold NAME FILE RANGES...: lockers.py in the background until the test ends
hold() {
    local name=$1
    shift
    : >"$1"
    python3 lockers.py "$@" >"$name.out" &
    PIDS+=($!)
    for _ in $(seq 600); do
        [ -s "$name.out" ] && return 0
        sleep 0.05
    done
    echo "setup: lockers.py $* did not start"
    exit 1
}

: >nobody.img
assert_eq "a file nobody locks" "" "$(lock_bytes nobody.img)"
hold a x.img 100,1 201,1 203,1
hold b ranges.img 0,2 103,1 300,100 5000,0
assert_eq "bytes, a run, to the end of the file" "0 1 103 300-399 5000-EOF" \
    "$(lock_bytes ranges.img)"
hold c two.img 100,1 201,1
hold d two.img 100,1
assert_eq "two holders of byte 100" "100 201" "$(lock_bytes two.img)"

python3 lockers.py --churn 10 &
PIDS+=($!)
sleep 0.5
bad=0 first=
for i in $(seq 100); do
    h=$(lock_bytes x.img)
    if [ "$h" != "100 201 203" ]; then
        bad=$((bad + 1))
        first=${first:-"reading $i: '$h'"}
    fi
done
assert_eq "readings of 100 201 203 that differ, others locking meanwhile${first:+ ($first)}" \
    0 "$bad"
finish
