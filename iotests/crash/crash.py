#!/usr/bin/env python3
"""The crash-state explorer: rebuild a file as a power loss could have left
it, from a log of every write and flush, and judge each state.

Power loss, not kill -9: a crash keeps exactly what a completed flush
covered; of the writes after it, any subset may have reached the disk, in
order, each write possibly torn at 4 KiB pages.  The logs come from qimg's
recording node (record:LOG:FILE, block/record.c) or from QEMU's blklogwrites
driver (dm-log-writes format), the positive control.

A state is judged by qemu-img, the oracle: its structure, and its contents
against the workload's model or what the operation's own rule allows
(judges.py says how).  The workload model (workload.py): every guest sector
a workload writes is tagged, and a marker after each op proves it
returned.  Encrypted images (--luks-secret PASS): the log's writes are
decrypted by a LUKS1 reader of its own (luks.py) to find the markers.

This file is the command line and the explore loop (the states judged by
a pool of workers, identical states once); the rest is in its modules:
  crashlog.py  the recording-log reader
  states.py    the power-loss states: cut points, the files a cut leaves
  workload.py  the tagged guest workload, its model, the contents check
  luks.py      the LUKS1 reader
  order.py     the ordering check of a whole log (--check-order)
  judges.py    judging one state (formats.py: the formats but qcow2)

Subcommands (used by iotests/tests/05x-crash-*.sh, through lib.sh):
  workload  write a qimg io / qemu-io script, its tag files and a model
  explore   rebuild states from a log and judge them; prints a summary line
  summary   the totals of the explores of a --summary file
  serve     run the others as requests read from stdin (one python3 a test)
"""
import argparse
import json
import os
import random
import shutil
import struct
import sys
import tempfile
import time

from crashlog import W_AUX_FUA, W_FLUSH, W_WRITE, load_log, ring_writes
from judges import (QEMU_IMG, check_bitmaps, check_expected, check_inside_file,
                    check_snapshots, check_vmstate, forget_refs, forget_snapshots,
                    image_args, judge_structure, load_expected, run)
from luks import Luks
from order import check_data_before_l2
from states import build_state, cut_points, state_digest
from workload import Model, check_contents, make_workload, marker_positions, plaintext_tags


_CTX = {}  # what the state workers share (set before the pool forks)


def judge_state(job):
    """Build and judge state k (cut, its own seed); returns (k, cut, keep,
    verdict name, problems)."""
    k, cut, seed = job
    c = _CTX
    forget_snapshots()
    args, entries = c["args"], c["entries"]
    rng = random.Random(seed)
    keep = rng.choice([0.0, 0.3, 0.7, 1.0])
    work = tempfile.mkdtemp(prefix="state-", dir=c["work"])
    sdir = os.path.join(work, "s")
    os.makedirs(sdir)
    build_state(entries, cut, c["bases"], rng, keep, sdir)
    # the same files (and, judged against a model, the same newest marker)
    # get the same verdict: the first state to claim a digest is judged,
    # the others take its verdict (explore)
    key = state_digest(sdir, c["markers"][cut - 1] if c["markers"] and cut > 0 else -1)
    try:
        os.close(os.open(os.path.join(c["work"], "seen-" + key),
                         os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        shutil.rmtree(work, ignore_errors=True)
        return k, cut, keep, None, [], key
    for name, target in c["links"]:
        os.symlink(os.path.realpath(target), os.path.join(sdir, name))
    simg = os.path.join(sdir, os.path.basename(c["image"]))
    verdict, detail, rimg = judge_structure(simg, args.format, args.luks_secret)
    problems = []
    if verdict == "corrupt" and c["base_errors"] is not None:
        errs = set(l for l in detail.splitlines() if "ERROR" in l)
        if errs and errs <= c["base_errors"]:
            verdict = "unrepaired"  # still only what the repair set out to fix
    if verdict == "corrupt":
        lines = [l for l in detail.splitlines()
                 if "ERROR" in l or "Leaked" not in l and l.strip()]
        problems.append("qemu-img check: " + "\n    ".join(lines[:12]))
    elif verdict == "no-image" and not args.allow_no_image:
        problems.append("the file is not a %s image" % args.format)
    if not problems and verdict != "no-image":
        problems += check_inside_file(rimg, args.format)
    model, expect = c["model"], c["expect"]
    if not problems and verdict != "no-image" and (model or expect):
        raw = os.path.join(work, "state.raw")
        rc, out = run([QEMU_IMG, "convert"] + image_args(rimg, args.luks_secret, args.format) +
                      ["-O", "raw", raw], cwd=sdir)
        if rc != 0:
            problems.append("qemu-img convert failed: " + out.strip())
        elif model:
            newest = c["markers"][cut - 1] if cut > 0 else -1
            problems += check_contents(raw, model, newest)
        else:
            problems += check_expected(raw, expect, args.expect_mode)
    if not problems and verdict != "no-image" and args.snapshot_check:
        problems += check_snapshots(simg, args.snapshot_check, work)
    if not problems and verdict != "no-image" and args.bitmap_check:
        problems += check_bitmaps(simg, args.bitmap_check, work)
    if not problems and verdict != "no-image" and args.vmstate_check:
        problems += check_vmstate(simg, args.vmstate_check, work)
    if problems and args.keep_failed:
        shutil.copytree(sdir, os.path.join(args.keep_failed, "state-%d" % k),
                        symlinks=True)
    shutil.rmtree(work, ignore_errors=True)
    return k, cut, keep, "bad" if problems else verdict, problems, key



def explore(args):
    import multiprocessing
    t0, cpu0 = time.monotonic(), sum(os.times()[:4])
    entries = load_log(args.log, args.qemu_file)
    rng = random.Random(args.seed)
    bases = {}
    for spec in args.base:
        path, base = spec.split("=", 1)
        bases[os.path.realpath(path)] = open(base, "rb").read() if base else b""
    model, markers, expect = None, None, None
    if args.model:
        backing = open(args.backing_raw, "rb").read() if args.backing_raw else None
        model = Model(args.model, backing)
        luks = None
        if args.luks_secret:
            base = dict(spec.split("=", 1) for spec in args.base).get(args.image)
            luks = Luks(base or args.image, args.luks_secret)
        markers = marker_positions(entries, luks, os.path.realpath(args.image))
    plain = plaintext_tags(entries, os.path.realpath(args.image)) if args.no_plaintext else 0
    if args.expect_raw:
        expect = load_expected(args.expect_raw.split(","), args.expect_mode)
    work = tempfile.mkdtemp(prefix="crash-", dir=args.tmpdir)
    forget_refs()
    base_errors = None
    if args.base_errors:
        base_errors = set()
        rc, out = run([QEMU_IMG, "check", "-f", "qcow2", args.base_errors],
                      cwd=os.path.dirname(os.path.realpath(args.base_errors)))
        base_errors = set(l for l in out.splitlines() if "ERROR" in l)
    _CTX.update(base_errors=base_errors, args=args, entries=entries, bases=bases, model=model, markers=markers,
                expect=expect, work=work, image=os.path.realpath(args.image),
                links=[l.split("=", 1) for l in args.link])
    jobs = [(k, cut, rng.random()) for k, cut in
            enumerate(cut_points(entries, args.states, rng))]
    # a pool of workers costs ~0.2 s of CPU: worth it for many states only
    workers = min(args.jobs, len(jobs) // 8)
    try:
        if workers > 1:
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                results = pool.map(judge_state, jobs, chunksize=1)
        else:
            results = [judge_state(j) for j in jobs]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    counts, failures = {}, []
    judged = {key: (name, problems) for _k, _c, _p, name, problems, key in results
              if name is not None}
    copies = {}
    for r in results:
        copies[r[5]] = copies.get(r[5], 0) + 1
    for k, cut, keep, name, problems, key in sorted(results):
        if name is None:  # the same as a state judged
            counts[judged[key][0]] = counts.get(judged[key][0], 0) + 1
            continue
        counts[name] = counts.get(name, 0) + 1
        if problems:
            same = " (and %d identical states)" % (copies[key] - 1) if copies[key] > 1 else ""
            failures.append("state %d (cut %d of %d entries, keep %.1f)%s: %s" %
                            (k, cut, len(entries), keep, same, "\n  ".join(problems)))
    if plain:
        failures.insert(0, "%d sectors of the workload's data in the log in the clear" %
                        plain)
    fua = sum(1 for e in entries if e.type == W_WRITE and e.aux & W_AUX_FUA)
    if fua < args.min_fua_writes:
        failures.insert(0, "%d FUA writes in the log, fewer than the %d asked" %
                        (fua, args.min_fua_writes))
    links = None
    if args.check_order:
        order, links = check_data_before_l2(entries, os.path.realpath(args.image),
                                            bases.get(os.path.realpath(args.image), b""))
        if order:
            failures.insert(0, "log order: %d of %d L2 links written before a flush covered "
                            "the data they link (write.c invariant 1):\n    %s" %
                            (len(order), links, "\n    ".join(order[:3])))
    ring, ring_alloc = ring_writes(entries)
    if ring_alloc < args.min_ring_allocs:
        failures.insert(0, "%d allocating writes of the io_uring in the log (%d ring "
                        "writes), fewer than the %d asked: the path under test was "
                        "not taken" % (ring_alloc, ring, args.min_ring_allocs))
    total = sum(counts.values())
    cpu = sum(os.times()[:4]) - cpu0  # this process, its workers and their tools
    print("%s: %d states (%d distinct; %d log entries, %d flushes): %s (%.1f s, cpu %.1f s)" % (
        args.label, total, len(judged), len(entries),
        sum(1 for e in entries if e.type == W_FLUSH),
        ", ".join("%s %d" % kv for kv in sorted(counts.items())), time.monotonic() - t0, cpu))
    if ring:
        print("  %d writes through the io_uring, %d of them allocating" % (ring, ring_alloc))
    if fua:
        print("  %d FUA writes, durable by themselves" % fua)
    if links is not None:
        print("  %d L2 links in the log, checked for a flush of their data before them" %
              links)
    for f in failures[:args.show]:
        print("  " + f)
    if args.summary:
        with open(args.summary, "a") as f:
            f.write(json.dumps({"label": args.label, "states": total, "counts": counts,
                                "distinct": len(judged), "bad": len(failures),
                                "control": bool(args.expect_failures)}) + "\n")
    return 1 if failures and not args.expect_failures else 0



def virtual_size(img, fmt):
    """The disk size of image img: a qcow2 header's size field, else
    qemu-img info's (VHD rounds the size asked to its geometry)."""
    if fmt == "qcow2":
        with open(img, "rb") as f:
            return struct.unpack(">Q", f.read(32)[24:32])[0]
    rc, out = run([QEMU_IMG, "info", "-f", fmt, "--output=json", img])
    if rc != 0:
        raise RuntimeError("qemu-img info %s: %s" % (img, out))
    return json.loads(out)["virtual-size"]


def summary(args):
    """The totals of every explore a summary file holds, one line a group."""
    rows = [json.loads(l) for l in open(args.file)] if os.path.exists(args.file) else []
    groups = [("qimg, judged", lambda x: x["label"].startswith("qimg") and not x["control"]),
              ("qimg, reported only", lambda x: x["label"].startswith("qimg") and x["control"]),
              ("QEMU (positive control)", lambda x: x["label"].startswith("qemu"))]
    for name, pick in groups:
        r = [x for x in rows if pick(x)]
        if r:
            print("%s: %d cases, %d states (%d distinct), %d bad" %
                  (name, len(r), sum(x["states"] for x in r),
                   sum(x.get("distinct", x["states"]) for x in r), sum(x["bad"] for x in r)))
    return 0


def read_requests(f):
    """The requests of serve: each the count of its arguments, then the
    arguments, every one ended by a NUL byte."""
    buf = b""

    def token():
        nonlocal buf
        while b"\0" not in buf:
            more = f.read1(65536)
            if not more:
                return None
            buf += more
        t, buf = buf.split(b"\0", 1)
        return t.decode()
    while True:
        n = token()
        if n is None:
            return
        argv = [token() for _ in range(int(n))]
        if None in argv:
            return
        yield argv


def serve(ap):
    """Run the subcommands read from stdin (read_requests), one at a time,
    and answer each with its exit code on a line of fd 3.  One python3 then
    serves a whole test: its start and this module's imports cost ~0.15 s
    of CPU, and a test runs dozens."""
    import traceback
    os.set_inheritable(3, False)
    reply = os.fdopen(3, "w", buffering=1)
    for argv in read_requests(sys.stdin.buffer):
        try:
            rc = run_command(ap, ap.parse_args(argv))
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
        except Exception:  # noqa: BLE001 -- reported, and the next request runs
            traceback.print_exc()
            rc = 1
        sys.stdout.flush()
        sys.stderr.flush()
        reply.write("%d\n" % rc)
    return 0


def run_command(ap, args):
    if args.cmd == "workload":
        if args.size_of:
            args.size = virtual_size(args.size_of, args.format)
        make_workload(args)
        return 0
    if args.cmd == "summary":
        return summary(args)
    if args.cmd == "serve":
        return serve(ap)
    if args.luks_secret and args.format != "qcow2":
        ap.error("--luks-secret is for qcow2 images (encrypt.format=luks) only")
    return explore(args)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("serve", help="run subcommands read from stdin (see serve)")
    sm = sub.add_parser("summary")
    sm.add_argument("file", help="the --summary file of the explores")
    w = sub.add_parser("workload")
    w.add_argument("--dir", required=True)
    w.add_argument("--seed", default="1")
    size = w.add_mutually_exclusive_group(required=True)
    size.add_argument("--size", type=int)
    size.add_argument("--size-of", metavar="IMAGE",
                      help="the disk size of IMAGE (of --format) as qemu-img reports it")
    w.add_argument("--format", default="qcow2")
    w.add_argument("--cluster-size", type=int, default=65536)
    w.add_argument("--ops", type=int, default=60)
    w.add_argument("--max-len", type=int, default=1 << 20)
    w.add_argument("--spread", action="store_true", help="far apart offsets (L1 growth)")
    w.add_argument("--no-discard", dest="discard", action="store_false")
    w.add_argument("--aio", action="store_true",
                   help="tagged writes as qimg io aio_write, in flight (qimg only)")
    w.add_argument("--aio-depth", type=int, default=8)
    w.add_argument("--fua", type=float, default=0, metavar="P",
                   help="a tagged write (not --aio) has FUA with probability P")
    w.add_argument("--zero-align", type=int, default=0, metavar="BYTES",
                   help="zero writes cover whole BYTES-aligned units (zeroed grains)")
    e = sub.add_parser("explore")
    e.add_argument("--log", required=True)
    e.add_argument("--qemu-file", help="the file a QEMU blklogwrites log recorded")
    e.add_argument("--base", action="append", default=[],
                   help="PATH=COPY: the file's contents before the run (COPY empty: none)")
    e.add_argument("--image", required=True, help="the image file to judge")
    e.add_argument("--format", default="qcow2", choices=["qcow2", "vpc", "vdi", "vhdx", "vmdk"])
    e.add_argument("--link", action="append", default=[],
                   help="NAME=PATH: symlink NAME in each state (backing files)")
    e.add_argument("--model", help="model.json of a workload")
    e.add_argument("--backing-raw",
                   help="raw contents of the backing chain (zero-padded, or cut, to the disk)")
    e.add_argument("--expect-raw", help="RAW[,RAW|zero]: allowed contents")
    e.add_argument("--expect-mode", default="one-of", choices=["one-of", "per-sector"])
    e.add_argument("--snapshot-check", help="NAME=RAW[,...]; NAME? when it may be absent")
    e.add_argument("--bitmap-check", help="NAME=OFF:LEN[+...]: a consistent bitmap covers these")
    e.add_argument("--vmstate-check", help="NAME=STREAM: the snapshot's VM state")
    e.add_argument("--base-errors", metavar="IMAGE",
                   help="a repair: states may report the errors IMAGE reports")
    e.add_argument("--allow-no-image", action="store_true",
                   help="a state that is not a qcow2 image yet passes (create)")
    e.add_argument("--states", type=int, default=50)
    e.add_argument("--seed", default="1")
    e.add_argument("--label", default="crash")
    e.add_argument("--summary", help="append a JSON line with the counts")
    e.add_argument("--show", type=int, default=3)
    e.add_argument("--keep-failed", help="copy failing states here")
    e.add_argument("--tmpdir", default=None)
    e.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="at most this many workers (one a 8 states)")
    e.add_argument("--luks-secret", metavar="PASS",
                   help="the image is encrypted (LUKS) with this passphrase")
    e.add_argument("--no-plaintext", action="store_true",
                   help="fail if a workload tag is in the log in the clear")
    e.add_argument("--min-fua-writes", type=int, default=0, metavar="N",
                   help="fail unless the log holds N writes with FUA (record.c)")
    e.add_argument("--min-ring-allocs", type=int, default=0, metavar="N",
                   help="fail unless N writes to fresh ranges came from the io_uring")
    e.add_argument("--check-order", action="store_true",
                   help="qcow2: fail if an L2 entry is written before the data it links "
                   "was flushed, anywhere in the log (order.py)")
    e.add_argument("--expect-failures", action="store_true",
                   help="positive control: report, do not fail")
    return run_command(ap, ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
