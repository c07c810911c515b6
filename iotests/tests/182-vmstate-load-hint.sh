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

# hints ARGS...: strace qimg vmstate load ARGS img.qcow2 s out.bin; prints
# the fadvise64 advice words in order, each with "image" when its
# descriptor was opened on img.qcow2, then "all-hinted" when the image's
# descriptors read at least the state's size while the hint was on
hints() {
    rm -f out.bin
    strace -f -qq -e trace=openat,fadvise64,preadv,pread64,read -o st.out \
        "$QIMG" vmstate load "$@" img.qcow2 s out.bin
    python3 - st.out "$(stat -c %s state.bin)" <<'EOF'
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
}

assert_eq "writeback: one hint around the reads" "SEQUENTIAL/image NORMAL/image all-hinted" \
    "$(hints)"
assert_rc "writeback: the bytes saved" 0 cmp out.bin state.bin
assert_eq "writeback, 32 KiB reads: the same hint" "SEQUENTIAL/image NORMAL/image all-hinted" \
    "$(hints --chunk-size 32k)"
assert_rc "writeback, 32 KiB reads: the bytes saved" 0 cmp out.bin state.bin
assert_eq "-t none: no hint" "none" "$(hints -t none)"
assert_rc "-t none: the bytes saved" 0 cmp out.bin state.bin
assert_eq "-t writethrough: the hint" "SEQUENTIAL/image NORMAL/image all-hinted" \
    "$(hints -t writethrough)"
assert_rc "-t writethrough: the bytes saved" 0 cmp out.bin state.bin
assert_rc "check" 0 "$QEMU_IMG" check -q img.qcow2
finish
