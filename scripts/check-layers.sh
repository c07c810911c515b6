#!/usr/bin/env bash
# scripts/check-layers.sh: fail on any #include that runs upward between the
# layers (README, "A tour of the layers"):
#   tools/, nbd/, examples/  ->  include/qimg/ (the public API) only
#   include/qimg/            ->  include/qimg/
#   api/                     ->  api/ qcow2/ raw/ luks/ crypto/ vmdk/ vpc/ vhdx/ vdi/ qed/
#                                block/ aio/ and qimg/
#   qcow2/                   ->  qcow2/ crypto/ block/ aio/
#   raw/                     ->  raw/ block/ aio/
#   luks/                    ->  luks/ crypto/ block/ aio/
#   crypto/                  ->  crypto/ block/ aio/
#   vmdk/ vpc/ vhdx/ vdi/ qed/  ->  their own folder, block/ aio/
#   block/                   ->  block/ aio/
#   aio/                     ->  aio/
# A bare name of a header next to the including file ("qimg-tool.h" in
# tools/) is the layer's own.  tests/ and fuzz/ test the internals and may
# include anything.  Only quoted includes are layers; <...> are system
# headers.  Prints each violation as FILE:LINE: include "X" (LAYER may not
# use DIR) and exits 1.
set -u
cd "$(dirname "$0")/.."

allowed() { # layer -> space-separated include prefixes it may use
    case $1 in
    tools | nbd | examples) echo "qimg/" ;;
    include) echo "qimg/" ;;
    api) echo "api/ qcow2/ raw/ luks/ crypto/ vmdk/ vpc/ vhdx/ vdi/ qed/ block/ aio/ qimg/" ;;
    qcow2) echo "qcow2/ crypto/ block/ aio/" ;;
    raw) echo "raw/ block/ aio/" ;;
    luks) echo "luks/ crypto/ block/ aio/" ;;
    crypto) echo "crypto/ block/ aio/" ;;
    vmdk | vpc | vhdx | vdi | qed) echo "$1/ block/ aio/" ;;
    block) echo "block/ aio/" ;;
    aio) echo "aio/" ;;
    *) echo "*" ;;
    esac
}

bad=0
checked=0
while IFS= read -r f; do
    layer=${f%%/*}
    ok=$(allowed "$layer")
    [ "$ok" = "*" ] && continue
    checked=$((checked + 1))
    while IFS=: read -r line inc; do
        inc=${inc#*\"}
        inc=${inc%%\"*}
        pass=0
        case $inc in */*) ;; *) [ -f "$(dirname "$f")/$inc" ] && pass=1 ;; esac
        for p in $ok; do
            case $inc in "$p"*) pass=1 ;; esac
        done
        if [ $pass = 0 ]; then
            echo "$f:$line: include \"$inc\" ($layer/ may not use ${inc%%/*}/)"
            bad=$((bad + 1))
        fi
    done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f")
done < <(git ls-files '*.c' '*.h')

echo "layers: $checked files checked, $bad upward includes"
[ $bad -eq 0 ]
