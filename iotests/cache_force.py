#!/usr/bin/env python3
"""cache_force.py MODE COMMAND...: run COMMAND (iotests/run 003 ...) with
qemu-img, qemu-io and qimg wrapped so that, before each of their runs,
the page cache over the unwritten (fallocated, never written) extents of
the files in the test's folder is put in a state MODE says:
  evict   drop their cached pages (drop_caches)
  pevict  drop some of them: random 4-64 KiB pieces (memory pressure)
  cache   read them (what a compare or convert before did)
  alt     cache and evict by turns, per test: the Nth tool run of a
          test caches, the N+1th evicts (deterministic)
What qemu-img map (SEEK_DATA on ext4) says of such an extent depends on
which of its pages are cached (common.sh settle, iotest 219): a test
whose comparison fails here fails now and then on a loaded machine.
pevict failures are such flakes; alt and cache ones are when something
in the test reads the file before (readahead around a probe or a table
counts).  The wrappers come first in PATH and in QEMU_IMG, QEMU_IO, QIMG;
QIMG_NBD_PLUGIN is kept.  Each file touched is logged, with the tool's
arguments, to $CACHE_FORCE_LOG when set.
"""
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # (no __pycache__ in iotests/)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import settle  # noqa: E402  (unwritten_extents: FIEMAP)

MODES = ("evict", "pevict", "cache", "alt")


def alt_mode():
    """cache or evict by turns, counted per test (its scratch folder)."""
    cwd = os.getcwd()
    i = cwd.find("/qimg-iotest.")
    j = cwd.find("/", i + 1) if i >= 0 else -1
    key = cwd[:j] if j > 0 else cwd
    counter = os.path.join(tempfile.gettempdir(), "cache_force." + hashlib.md5(key.encode()).hexdigest())
    try:
        with open(counter) as f:
            n = int(f.read())
    except (OSError, ValueError):
        n = 0
    with open(counter, "w") as f:
        f.write(str(n + 1))
    return "cache" if n % 2 == 0 else "evict"


def force(fd, extents, mode):
    if mode == "evict":
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    elif mode == "pevict":
        n = 0
        for lo, ln in extents:
            end = lo + ln
            while lo < end and n < 8192:
                step = 4096 * random.choice([1, 1, 2, 4, 8, 16])
                if random.random() < 0.5:
                    os.posix_fadvise(fd, lo, min(step, end - lo), os.POSIX_FADV_DONTNEED)
                lo += step
                n += 1
    else:
        budget, size = 64 << 20, os.fstat(fd).st_size
        for lo, ln in extents:
            end = min(lo + ln, size, lo + budget)
            while lo < end:
                b = os.pread(fd, min(1 << 20, end - lo), lo)
                if not b:
                    break
                lo += len(b)
                budget -= len(b)


def act(tool, args):
    mode = os.environ.get("CACHE_FORCE_MODE", "evict")
    if mode == "alt":
        mode = alt_mode()
    touched = []
    for root, dirs, files in os.walk("."):
        dirs[:] = [d for d in dirs if d != ".bin"] if root == "." else []
        for name in files:
            path = os.path.join(root, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                extents = settle.unwritten_extents(fd)
                if extents:
                    force(fd, extents, mode)
                    touched.append(f"{mode}:{path}")
            except OSError:
                pass
            finally:
                os.close(fd)
    log = os.environ.get("CACHE_FORCE_LOG")
    if touched and log:
        with open(log, "a") as f:
            f.write(f"{os.getcwd()} {tool} {' '.join(touched)} :: {' '.join(args)[:120]}\n")


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--act":
        act(sys.argv[2], sys.argv[3:])
        return 0
    if len(sys.argv) < 3 or sys.argv[1] not in MODES:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(here)
    real = {
        "qemu-img": shutil.which(os.environ.get("QEMU_IMG", "qemu-img")),
        "qemu-io": shutil.which(os.environ.get("QEMU_IO", "qemu-io")),
        "qimg": os.path.abspath(os.environ.get("QIMG", os.path.join(repo, "build/tools/qimg"))),
    }
    os.environ.setdefault(
        "QIMG_NBD_PLUGIN", os.path.join(os.path.dirname(real["qimg"]), "../nbd/nbdkit-qimg-plugin.so")
    )
    wrap = tempfile.mkdtemp(prefix="cache_force.")
    for tool, path in real.items():
        if not path:
            print(f"cache_force.py: {tool} not found", file=sys.stderr)
            return 2
        with open(os.path.join(wrap, tool), "w") as f:
            f.write(f'#!/bin/bash\n{sys.executable} {os.path.abspath(__file__)} --act {tool} "$@" 2>/dev/null\n')
            f.write(f'exec -a "$0" {path} "$@"\n')
        os.chmod(os.path.join(wrap, tool), 0o755)
    os.environ.update(
        CACHE_FORCE_MODE=sys.argv[1],
        PATH=wrap + os.pathsep + os.environ["PATH"],
        QEMU_IMG=os.path.join(wrap, "qemu-img"),
        QEMU_IO=os.path.join(wrap, "qemu-io"),
        QIMG=os.path.join(wrap, "qimg"),
    )
    try:
        return subprocess.call(sys.argv[2:])
    finally:
        shutil.rmtree(wrap, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
