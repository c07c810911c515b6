#!/usr/bin/env bash
# scripts/check-install.sh BUILD_DIR: an embedder's view of libqimg.
# Installs the build into a scratch root (meson install --destdir), builds
# examples/embed.c with nothing but `pkg-config libqimg` from there (the
# installed headers and libqimg.so), runs it, and has qemu-img check,
# qemu-io (the disk) and qemu-img info (the snapshot and its VM state)
# verify the image it wrote.  Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT

# what meson install installs, built (up to date) first, not all of the
# tree: make test builds no unit tests in build/ (scripts/installed-targets.sh)
ninja -C "$build" $(scripts/installed-targets.sh "$build") >/dev/null
meson install -C "$build" --no-rebuild --destdir "$root" --quiet >/dev/null
pcfile=$(find "$root" -name libqimg.pc | head -1)
[ -n "$pcfile" ] || { echo "install: no libqimg.pc installed"; exit 1; }
# the installed .pc, relocated to the scratch root (its Requires resolve
# on the system: glib)
mkdir "$root/pc"
sed "s|^prefix=|prefix=$root|" "$pcfile" >"$root/pc/libqimg.pc"
export PKG_CONFIG_PATH=$root/pc
libdir=$(pkg-config --variable=libdir libqimg)
cc -std=c11 -Wall -Wextra -Werror -o "$root/embed" examples/embed.c \
    $(pkg-config --cflags --libs libqimg) -pthread
# the program must resolve libqimg from the install, not the build tree
# (ldd's output taken whole first: under pipefail, grep -q ending at its
# match while ldd still writes failed the check with ldd's SIGPIPE, 11 runs
# in 100 on a loaded machine)
linked=$(LD_LIBRARY_PATH=$libdir ldd "$root/embed")
grep -q "$libdir/libqimg.so" <<<"$linked" ||
    { echo "install: embed does not link the installed libqimg.so"; exit 1; }
img=$root/embed.qcow2
LD_LIBRARY_PATH=$libdir "$root/embed" "$img"
qemu-img check -q "$img"
# what embed wrote, as QEMU reads it: MiB t of the disk holds t + 1 (the
# zeroing of MiB 0 was reverted by loadvm), the rest reads as zeros ...
if ! out=$(qemu-io -f qcow2 -c 'read -q -P 1 0 1M' -c 'read -q -P 2 1M 1M' \
    -c 'read -q -P 3 2M 1M' -c 'read -q -P 4 3M 1M' -c 'read -q -P 0 4M 60M' \
    "$img" 2>&1) || [ -n "$out" ]; then
    echo "install: qemu-io reads other data: $out"
    exit 1
fi
# ... and snapshot vm1 holds the 3 MiB + 123 bytes of VM state
info=$(qemu-img info --output=json "$img")
if ! grep -q '"name": "vm1"' <<<"$info" || ! grep -q '"vm-state-size": 3145851' <<<"$info"; then
    echo "install: qemu-img does not see snapshot vm1 with its VM state: $info"
    exit 1
fi
echo "install: examples/embed built against the installed libqimg; qemu-img check clean," \
    "qemu-io and qemu-img info read what it wrote"
