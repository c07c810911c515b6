#!/usr/bin/env bash
# scripts/check-abi.sh BUILD_DIR: the public ABI agrees with itself
# (include/qimg/qimg.h, "ABI" rules; libqimg.map):
#  1. every function declared in include/qimg/*.h is exported by
#     libqimg.so, and nothing else is;
#  2. every export carries a symbol version, and the versions are exactly
#     libqimg.map's nodes (one per release, rule 4);
#  3. libqimg.map lists exactly the exports.
# Prints the differences and exits 1 on any.
set -uo pipefail
cd "$(dirname "$0")/.."
lib=${1:-build}/libqimg.so
[ -e "$lib" ] || { echo "abi: $lib not built"; exit 1; }

nodes=$(sed -n 's/^\(QIMG_[0-9.]*\) {$/\1/p' libqimg.map | sort -u)
declared=$(grep -ohE '\bqimg_[a-z0-9_]+[[:space:]]*\(' include/qimg/*.h | sed 's/[[:space:]]*($//' | sort -u)
exported=$(nm -D --defined-only "$lib" | awk '$2 == "T" {sub(/@.*/, "", $3); print $3}' | sort -u)
mapped=$(sed -n 's/^[[:space:]]*\(qimg_[a-z0-9_]*\);$/\1/p' libqimg.map | sort -u)
versions=$(objdump -T "$lib" | awk '$NF ~ /^qimg_/ && $4 != "*UND*" {print $(NF-1)}' | sort -u)

bad=0
diff_sets() { # NAME_A A NAME_B B
    local d
    d=$(comm -3 <(echo "$2") <(echo "$4"))
    if [ -n "$d" ]; then
        echo "abi: $1 vs $3 differ (left: only in $1, indented: only in $3):"
        echo "$d"
        bad=1
    fi
}
diff_sets headers "$declared" exports "$exported"
diff_sets libqimg.map "$mapped" exports "$exported"
if [ "$versions" != "$nodes" ]; then
    echo "abi: exports carry version(s) '$(echo $versions)', libqimg.map's nodes are '$(echo $nodes)'"
    bad=1
fi
[ $bad = 0 ] && echo "abi: $(echo "$exported" | wc -l) functions, versions $(echo $nodes), headers = exports = libqimg.map"
exit $bad
