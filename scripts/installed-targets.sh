#!/usr/bin/env bash
# scripts/installed-targets.sh BUILD_DIR: the ninja targets of BUILD_DIR
# that meson install installs (libqimg.so, qimg, nbdkit-qimg-plugin.so),
# one a line.  make test builds only these in build/ (its unit tests run
# from build-asan), and scripts/check-install.sh installs them.
set -euo pipefail
build=${1:-build}
meson introspect --targets "$build" | python3 -c '
import json, os, sys
build = os.path.realpath(sys.argv[1])
for t in json.load(sys.stdin):
    if t["installed"]:
        for f in t["filename"]:
            print(os.path.relpath(f, build))' "$build"
