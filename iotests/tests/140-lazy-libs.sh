#!/bin/bash
# Libraries qimg loads at their first use instead of at every start (dl.h
# invariant 1), seen in the dynamic loader's own log (LD_DEBUG=files), as
# 062 checks libnbd:
#  - GnuTLS (crypto/gnutls-lib.c): not by a command that never encrypts
#    (create, info, io, convert of plain images, --version), but by a LUKS
#    create (random bytes, PBKDF2) and by an encrypted qcow2 opened with its
#    key, whose data then reads as qemu-img wrote it;
#  - no library at all for a json: name (api/json-parse.c reads it; json-glib
#    with GObject and GIO was loaded for it before);
#  - a library that cannot be loaded (an empty file, or another library
#    under its soname, first in LD_LIBRARY_PATH) is an error naming it and
#    the Debian package, or the function it lacks; commands that do not need
#    it still work, and a failed create leaves no file.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

# loaded SONAME CMD...: how many times the loader ran SONAME's initialiser
loaded() {
    local so=$1
    shift
    LD_DEBUG=files "$@" 2>&1 >/dev/null | grep -c "calling init: .*/${so//./\\.}\$"
}
GT=libgnutls.so.30
S="--object secret,id=s0,data=hunter2"

"$QEMU_IMG" create -q -f qcow2 p.qcow2 1M
"$QEMU_IO" -c 'write -P 0x5a 0 64k' p.qcow2 >/dev/null
# shellcheck disable=SC2086
"$QEMU_IMG" create -q -f qcow2 $S -o encrypt.format=luks,encrypt.key-secret=s0,encrypt.iter-time=10 \
    e.qcow2 1M
# shellcheck disable=SC2086
"$QEMU_IO" $S --image-opts -c 'write -P 0x6b 0 64k' \
    driver=qcow2,file.filename=e.qcow2,encrypt.key-secret=s0 >/dev/null
J="json:{'driver': 'qcow2', 'file': {'driver': 'file', 'filename': 'p.qcow2'}}"

# 1. Nothing that never encrypts loads them, a json: name neither.
for cmd in "--version" "create -q -f qcow2 n.qcow2 1M" "info p.qcow2" \
    "io -c read_-P_0x5a_0_64k p.qcow2" "convert -O raw p.qcow2 p.raw" \
    "info --image-opts driver=qcow2,file.filename=p.qcow2" \
    "info json:{'driver':'qcow2','file':{'driver':'file','filename':'p.qcow2'}}"; do
    # shellcheck disable=SC2086
    set -- $cmd
    set -- "${@//_/ }"
    for so in $GT libjson-glib-1.0.so.0 libgobject-2.0.so.0 libgio-2.0.so.0; do
        assert_eq "$so not loaded by qimg $cmd" 0 "$(loaded $so "$QIMG" "$@")"
    done
done
# (the commands above did their work)
assert_rc "convert of a plain image" 0 "$QEMU_IMG" compare -q p.qcow2 p.raw

# 2. Encryption loads GnuTLS, and only it.
# shellcheck disable=SC2086
assert_eq "GnuTLS loaded by create -f luks" 1 \
    "$(loaded $GT "$QIMG" create -q -f luks $S -o key-secret=s0,iter-time=10 l.luks 1M)"
# shellcheck disable=SC2086
assert_eq "luks image made" "luks" \
    "$("$QEMU_IMG" info $S --output=json --image-opts driver=luks,file.filename=l.luks,key-secret=s0 |
        sed -n 's/.*"format": "\(.*\)".*/\1/p' | head -n 1)"
E_OPTS="driver=qcow2,file.filename=e.qcow2,encrypt.key-secret=s0"
# shellcheck disable=SC2086
assert_eq "GnuTLS loaded by an encrypted read" 1 \
    "$(loaded $GT "$QIMG" io $S --image-opts -c 'read -P 0x6b 0 64k' "$E_OPTS")"
# shellcheck disable=SC2086
assert_eq "the encrypted data as qemu-io wrote it" "ok" \
    "$("$QIMG" io $S --image-opts -c 'read -P 0x6b 0 64k' "$E_OPTS" | grep -q '^read 65536/65536' && echo ok)"
same_as_qemu info "$J"

# 3. A library that cannot be loaded.
mkdir fake other
: >fake/$GT
zlib=$(ldd "$QIMG" | awk '$1 == "libz.so.1" { print $3 }')
cp "$zlib" other/$GT
assert_rc "create -f luks without GnuTLS" 1 env LD_LIBRARY_PATH="$PWD/fake" "$QIMG" create -q \
    -f luks $S -o key-secret=s0,iter-time=10 m.luks 1M
assert_eq "create -f luks without GnuTLS: message" \
    "qimg: m.luks: Encryption needs $GT (Debian: libgnutls30): $PWD/fake/$GT: file too short" \
    "$(cat "$SCRATCH/.out")"
assert_eq "no file left by the failed create" "" "$(ls m.luks 2>/dev/null)"
assert_rc "an encrypted open without GnuTLS" 1 env LD_LIBRARY_PATH="$PWD/other" "$QIMG" io $S \
    --image-opts -c 'read 0 64k' "$E_OPTS"
assert_eq "an encrypted open without GnuTLS: message" "1" \
    "$(grep -c "$GT has no gnutls_" "$SCRATCH/.out")"
assert_rc "a plain read without GnuTLS" 0 env LD_LIBRARY_PATH="$PWD/fake" "$QIMG" io \
    -c 'read -P 0x5a 0 64k' p.qcow2
assert_rc "a json: name without GnuTLS" 0 env LD_LIBRARY_PATH="$PWD/fake" "$QIMG" info "$J"

finish
