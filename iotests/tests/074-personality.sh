#!/bin/bash
# qimg under the names qemu-img and qemu-io (tools/main.c's personalities,
# the links make install puts in libexec/qimg/qemu-compat): what scripts
# that call qemu-img and qemu-io by name see --
#  - --version's first line "qemu-img version 7.2.0 (qimg X.Y.Z)", parsed
#    as Cinder parses it (>= 2.10);
#  - messages byte for byte as the real tools print them (no program name
#    to filter): open errors, usage errors, the --help hint, qemu-io's
#    "can't open device";
#  - every synopsis line of --help has qemu-img's shape: for each command
#    both have, qimg's options are qemu-img's (with --object, whose
#    secrets qimg takes; plus check -p, qimg's own) and the
#    file operands are the same;
#  - qemu-io's prompt and command output.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3

ln -s "$QIMG" qemu-img
ln -s "$QIMG" qemu-io
v=$(./qemu-img --version | head -n 1)
assert_rc "qemu-img --version: '$v'" 0 python3 -c '
import re, sys
m = re.match(r"qemu-img version (\d+)\.(\d+)\.(\d+) \(qimg \d+\.\d+\.\d+\)$", sys.argv[1])
sys.exit(0 if m and (int(m[1]), int(m[2])) >= (2, 10) else 1)' "$v"
assert_eq "qemu-io --version" "qemu-io version 7.2.0" \
    "$(./qemu-io --version | head -n 1 | cut -d' ' -f1-3)"
assert_eq "qemu-img -V" "$v" "$(./qemu-img -V | head -n 1)"

"$QEMU_IMG" create -q -f qcow2 d.qcow2 1M
"$QEMU_IO" -c 'write -P 5 0 64k' d.qcow2 >/dev/null
# same_stderr DESC ARGS...: the real qemu-img and the link, same stderr and rc
same_stderr() {
    local desc=$1 tool=$2
    shift 2
    "$tool" "$@" >q.out 2>q.err
    local qrc=$?
    "./$(basename "$tool")" "$@" >m.out 2>m.err
    local mrc=$?
    assert_eq "$desc: exit code" "$qrc" "$mrc"
    assert_eq "$desc: stderr" "$(cat q.err)" "$(cat m.err)"
}
same_stderr "no arguments" qemu-img
same_stderr "unknown command" qemu-img frobnicate
same_stderr "missing file" qemu-img info nosuch.qcow2
same_stderr "bad option" qemu-img info --bogus d.qcow2
same_stderr "check of a missing file" qemu-img check nosuch.qcow2
same_stderr "create without size" qemu-img create -f qcow2 x.qcow2
same_stderr "convert usage" qemu-img convert d.qcow2
same_stderr "qemu-io: no such image" qemu-io -c 'read 0 512' nosuch.qcow2
same_stderr "qemu-io: read beyond the end" qemu-io -c 'read 2M 512' d.qcow2
assert_eq "qemu-io: read output" \
    "$("$QEMU_IO" -c 'read -P 5 0 512' d.qcow2 | head -n 1)" \
    "$(./qemu-io -c 'read -P 5 0 512' d.qcow2 | head -n 1)"
assert_eq "qemu-io: the prompt" "$(echo quit | "$QEMU_IO" d.qcow2)" \
    "$(echo quit | ./qemu-io d.qcow2)"
assert_eq "qemu-img info" "$("$QEMU_IMG" info d.qcow2 | grep -v '^disk size')" \
    "$(./qemu-img info d.qcow2 | grep -v '^disk size')"

# synopsis lines
"$QEMU_IMG" --help >q.help
./qemu-img --help >m.help
assert_rc "--help synopsis lines have qemu-img's shape" 0 python3 - q.help m.help <<'PY'
import re, sys
ALLOWED_EXTRA = {("check", "[-p]")}  # qimg's own, documented
def groups(line):
    out, depth, cur, words = [], 0, "", []
    for ch in line:
        if ch == "[":
            depth += 1
        if depth:
            cur += ch
        elif ch == " ":
            if cur.strip():
                words.append(cur.strip())
            cur = ""
        else:
            cur += ch
        if ch == "]":
            depth -= 1
            if depth == 0:
                out.append(cur.strip())
                cur = ""
    if cur.strip():
        words.append(cur.strip())
    return out, words
def synopses(path, strip):
    res = {}
    for l in open(path):
        if re.match(r"  [a-z]", l) and not l.startswith("   "):
            l = l.strip()
            if strip:
                l = l.replace("[--image-opts | -f fmt]", "[--image-opts] [-f fmt]")
            res.setdefault(l.split()[0], l)
    return res
q, m = synopses(sys.argv[1], True), synopses(sys.argv[2], False)
bad = 0
for name, line in m.items():
    if name not in q:
        continue
    mg, mw = groups(line)
    qg, qw = groups(q[name])
    extra = [g for g in mg if g not in qg and (name, g) not in ALLOWED_EXTRA]
    if extra or mw != qw:
        bad += 1
        print("%s: options not qemu-img's %s; operands %s, qemu-img's %s" % (name, extra, mw, qw))
print("%d synopsis lines compared" % sum(1 for n in m if n in q))
sys.exit(1 if bad else 0)
PY

finish
