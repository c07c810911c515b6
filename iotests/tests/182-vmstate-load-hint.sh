#!/bin/bash
# qimg vmstate load through the page cache tells the kernel the image is
# read sequentially (api/vmstate-read.c invariant 6, block/file.c
# invariant 15: posix_fadvise SEQUENTIAL on the descriptor the state is
# read from, which doubles its read-ahead window, and NORMAL again at the
# end of the stream); with -t none (O_DIRECT, no read-ahead) it gives no
# hint.  Under strace: the hint goes to a descriptor of the image, once
# each way, and every byte of the state is read while it is on; the bytes
# loaded are the bytes saved in every mode and read size, and the image
# checks clean.
. "${0%/*}/../common.sh"
requires qimg qemu-img python3 strace

qi create -q -f qcow2 img.qcow2 64M
head -c $((5 * 1048576 + 123)) /dev/urandom >state.bin
"$QIMG" vmstate save img.qcow2 s state.bin

# hints DESC ARGS...: strace qimg vmstate load ARGS img.qcow2 s out.bin,
# which must succeed with nothing on stderr (traced: else its own FAILED
# line, return 1); HINTS = the fadvise64 advice words in order, each with
# "image" when its descriptor was opened on img.qcow2, then "all-hinted"
# when the image's descriptors read at least the state's size while the
# hint was on
hints() {
    local desc=$1
    shift
    rm -f out.bin
    HINTS=
    traced "$desc: vmstate load" st.out -e trace=openat,fadvise64,preadv,pread64,read -- \
        "$QIMG" vmstate load "$@" img.qcow2 s out.bin || return 1
    HINTS=$(python3 - st.out "$(stat -c %s state.bin)" <<'EOF'
import re, sys
img_fds, out, on, hinted = set(), [], False, 0
for line in open(sys.argv[1]):
    m = re.search(r'openat\(AT_FDCWD, "([^"]*)".*\) = (\d+)$', line)
    if m and m.group(1) == "img.qcow2":
        img_fds.add(m.group(2))
    m = re.search(r'fadvise64\((\d+), 0, 0, POSIX_FADV_(\w+)\) = 0', line)
    if m:
        out.append(m.group(2) + ("/image" if m.group(1) in img_fds else "/other"))
        on = m.group(2) == "SEQUENTIAL"
    m = re.search(r'(preadv|pread64|read)\((\d+), .*\) = (\d+)$', line)
    if m and m.group(2) in img_fds and on:
        hinted += int(m.group(3))
if hinted >= int(sys.argv[2]):
    out.append("all-hinted")
print(" ".join(out) if out else "none")
EOF
    )
}

# hint_case DESC WANT ARGS...: hints DESC ARGS... gives WANT, and the bytes
# loaded are the bytes saved
hint_case() {
    local desc=$1 want=$2
    shift 2
    hints "$desc" "$@" || return 1
    assert_eq "$desc: the hint" "$want" "$HINTS"
    assert_rc "$desc: the bytes saved" 0 cmp out.bin state.bin
}
hint_case "writeback" "SEQUENTIAL/image NORMAL/image all-hinted"
hint_case "writeback, 32 KiB reads" "SEQUENTIAL/image NORMAL/image all-hinted" --chunk-size 32k
hint_case "-t none (no hint)" "none" -t none
hint_case "-t writethrough" "SEQUENTIAL/image NORMAL/image all-hinted" -t writethrough
assert_rc "check" 0 "$QEMU_IMG" check -q img.qcow2
finish
