#!/usr/bin/env python3
"""map_flags.py IMG [FMT]: common.sh's map_flags in one python3 start (it
was two, settle.py's and the parser's, ~40 ms of CPU each here): IMG
settled (settle.py: raw images evicted, others written), then qemu-img's
allocation map of IMG (format FMT, default qcow2) without host offsets,
adjacent extents with the same flags merged, one "START LENGTH DEPTH
PRESENT ZERO DATA" line each.  qemu-img is $QEMU_IMG, or the binary
behind it ($QEMU_IMG_REAL) when that is common.sh's retry wrapper.  Exit 2 when the settle or qemu-img fails (its message on
stderr).
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import settle  # noqa: E402


def main():
    args = sys.argv[1:]
    if len(args) <= 2:
        return map_flags(args[0], args[1] if len(args) > 1 and args[1] else "qcow2")
    # IMG FMT IMG FMT...: each map in turn, a "--" line between two
    if len(args) % 2:
        print("usage: map_flags.py IMG [FMT] | IMG FMT IMG FMT...", file=sys.stderr)
        return 2
    for i in range(0, len(args), 2):
        if i:
            print("--", flush=True)
        rc = map_flags(args[i], args[i + 1] or "qcow2")
        if rc:
            return rc
    return 0


def map_flags(img, fmt):
    try:
        settle.settle(img, fmt == "raw")
    except OSError as e:
        print(f"settle.py: {e}", file=sys.stderr)
        return 2
    qemu_img = os.environ.get("QEMU_IMG") or "qemu-img"
    if os.path.basename(qemu_img) == "qemu-img-pbkdf-retry" and os.environ.get("QEMU_IMG_REAL"):
        qemu_img = os.environ["QEMU_IMG_REAL"]
    p = subprocess.run([qemu_img, "map", "-f", fmt, "--output=json", img],
                       stdout=subprocess.PIPE)
    if p.returncode != 0:
        return 2
    out = []
    for e in json.loads(p.stdout):
        k = (e["depth"], e["present"], e["zero"], e["data"])
        if out and out[-1][0] == k and out[-1][1] + out[-1][2] == e["start"]:
            out[-1][2] += e["length"]
        else:
            out.append([k, e["start"], e["length"]])
    for k, s, n in out:
        print(s, n, *k)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
