#!/usr/bin/env python3
"""watch-open.py FILE... -- CMD...: run CMD and print, for each FILE, how
many times it was opened or read while CMD ran (inotify IN_OPEN |
IN_ACCESS, through libc), one "FILE N" line each; exits with CMD's exit
code.  The iotests use it to prove that a refused image name was never
opened (and, as the control, that a trusted one was)."""
import ctypes
import ctypes.util
import os
import struct
import subprocess
import sys

IN_ACCESS, IN_OPEN, IN_NONBLOCK = 0x1, 0x20, 0o4000

libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
sep = sys.argv.index("--")
files, cmd = sys.argv[1:sep], sys.argv[sep + 1:]
fd = libc.inotify_init1(IN_NONBLOCK)
if fd < 0:
    sys.exit("inotify_init1: " + os.strerror(ctypes.get_errno()))
wds = {}
for f in files:
    wd = libc.inotify_add_watch(fd, f.encode(), IN_OPEN | IN_ACCESS)
    if wd < 0:
        sys.exit("inotify_add_watch %s: %s" % (f, os.strerror(ctypes.get_errno())))
    wds[wd] = f
rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
counts = {f: 0 for f in files}
while True:
    try:
        buf = os.read(fd, 65536)
    except BlockingIOError:
        break
    off = 0
    while off < len(buf):
        wd, mask, cookie, n = struct.unpack_from("iIII", buf, off)
        off += 16 + n
        counts[wds[wd]] += 1
for f in files:
    print(f, counts[f])
sys.exit(rc)
