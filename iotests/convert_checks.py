#!/usr/bin/env python3
"""convert_checks.py < LIST: iotest 014's checks of the qcow2 images that
qemu-img convert and qimg convert made, in one python3 start (they were
~15 processes per conversion: two map_flags python3s, and grep, sed and
cat around each qemu-img run; a start costs ~40 ms of CPU here).

Each line of LIST is "DESC<TAB>SRC<TAB>Q<TAB>M<TAB>COMPRESS" (the source,
qemu-img's output, qimg's output, COMPRESS 1 where the conversion ran with
-c from a non-empty source).  For each, with qemu-img ($QEMU_IMG, or the
binary behind common.sh's retry wrapper):
  1. qemu-img compare SRC M exits 0;
  2. qemu-img check --output=json M exits 0;
  3. map_flags (map_flags.py: settled, host offsets aside) of Q and M
     are the same;
  4. qemu-img info --output=json of Q and M are the same but for the
     lines naming a filename or the actual size;
  5. check's compressed-clusters and allocated-clusters (0 when absent)
     are the same for Q and M;
  6. with COMPRESS, M has compressed clusters.
Prints one line per check: "ok DESC: CHECK", or "FAILED: DESC: CHECK"
followed by indented lines that say how.
"""
import contextlib
import io
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import map_flags  # noqa: E402

QEMU_IMG = os.environ.get("QEMU_IMG") or "qemu-img"
if os.path.basename(QEMU_IMG) == "qemu-img-pbkdf-retry" and os.environ.get("QEMU_IMG_REAL"):
    QEMU_IMG = os.environ["QEMU_IMG_REAL"]


def qemu_img(*args):
    p = subprocess.run([QEMU_IMG, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    return p.returncode, p.stdout


def flags_of(img):
    out = io.StringIO()
    argv, sys.argv = sys.argv, ["map_flags.py", img, "qcow2"]
    try:
        with contextlib.redirect_stdout(out):
            rc = map_flags.main()
    finally:
        sys.argv = argv
    return out.getvalue() + ("" if rc == 0 else "map_flags exit %d\n" % rc)


def info_of(img):
    rc, out = qemu_img("info", "--output=json", img)
    return "".join(line for line in out.splitlines(True)
                   if "filename" not in line and "actual-size" not in line)


def counts(text):
    try:
        j = json.loads(text)
    except ValueError:
        return {}
    return {k: j.get(k, 0) for k in ("compressed-clusters", "allocated-clusters")}


def report(desc, what, ok, detail=""):
    if ok:
        print("ok %s: %s" % (desc, what))
    else:
        print("FAILED: %s: %s" % (desc, what))
        for line in detail.splitlines()[:40]:
            print("    " + line)


def diff(a, b):
    return "qemu-img's:\n%sqimg's:\n%s" % (a, b)


def main():
    for line in sys.stdin:
        desc, src, q, m, compress = line.rstrip("\n").split("\t")
        rc, out = qemu_img("compare", src, m)
        report(desc, "compare with the source", rc == 0, "exit %d\n%s" % (rc, out))
        rc, mcheck = qemu_img("check", "--output=json", m)
        report(desc, "qemu-img check", rc == 0, "exit %d\n%s" % (rc, mcheck))
        _, qcheck = qemu_img("check", "--output=json", q)
        qf, mf = flags_of(q), flags_of(m)
        report(desc, "map", qf == mf, diff(qf, mf))
        qi, mi = info_of(q), info_of(m)
        report(desc, "info", qi == mi, diff(qi, mi))
        qc, mc = counts(qcheck), counts(mcheck)
        for k in ("compressed-clusters", "allocated-clusters"):
            report(desc, k, qc.get(k) == mc.get(k) and k in qc,
                   "qemu-img's %s, qimg's %s" % (qc.get(k), mc.get(k)))
        if compress == "1":
            report(desc, "something compressed", mc.get("compressed-clusters", 0) != 0,
                   "qimg's compressed-clusters: %s" % mc.get("compressed-clusters"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
