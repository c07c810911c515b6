#!/bin/bash
# 174-json-option-values: what a json: name's options mean once parsed
# (api/json-flat.c invariants 1 and 3, json-name.c), against qemu-img and
# qemu-io 7.2:
#  - no driver and no file ("json:{}", a null file, a null filename):
#    QEMU's "Must specify either driver or file"; with a driver and no
#    file, 'A block device must be specified for "file"';
#  - a null driver, or one that is not a string, is none: the format is
#    probed (qimg said "Unknown driver ''");
#  - a number that is not an int64 (a fraction, an exponent, an integer
#    past int64) is kept as QEMU's text of it, so the option judges it or
#    is named as one the driver does not support (qimg said "Parameter
#    'a' expects a number");
#  - a null for an option of the node (locking, aio, read-only,
#    l2-cache-size, node-name, cache.direct, data-file, ...) is no option,
#    as QEMU skips it; a null for a key that is none is still "does not
#    support the option" (json-opts.c invariant 4).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

qi create -q -f qcow2 a.qcow2 1M
qio a.qcow2 'write -P 9 0 4k'

f='"file": {"driver": "file", "filename": "a.qcow2"}'
for j in '{}' '{"driver": null}' '{"file": null}' '{"file": {"filename": null}}' \
    '{"file": {"driver": null, "filename": null}}' '{"filename": null}' \
    '{"driver": "qcow2"}' '{"driver": "qcow2", "file": null}' \
    '{"driver": "qcow2", "filename": null}' '{"driver": ""}' \
    "{\"driver\": null, $f}" "{\"driver\": 1.5, $f}" "{\"driver\": true, $f}" \
    "{\"driver\": 7, $f}" '{"file": {"filename": "a.qcow2", "driver": null}}' \
    '{"file.filename": "a.qcow2", "file.driver": null, "driver": null}' \
    "{$f, \"a\": 1.5}" "{$f, \"a\": 99999999999999999999}" "{$f, \"a\": 1e3}" \
    "{$f, \"a\": -99999999999999999999}" "{\"driver\": \"qcow2\", $f, \"a\": 0.1}" \
    '{"file": {"filename": "a.qcow2", "a": 1.5}}' \
    '{"file": {"filename": "a.qcow2", "locking": 0.1}}' \
    '{"file": {"filename": "a.qcow2", "locking": 99999999999999999999}}' \
    '{"file": {"filename": "a.qcow2", "locking": 18446744073709551615}}' \
    '{"file": {"filename": "a.qcow2", "locking": 9223372036854775808}}' \
    '{"file": {"filename": "a.qcow2", "locking": 1e300}}' \
    '{"file": {"filename": "a.qcow2", "locking": 1E2}}' \
    '{"file": {"filename": "a.qcow2", "locking": -0.0}}' \
    "{\"driver\": \"qcow2\", $f, \"l2-cache-size\": 1.5}" \
    "{\"driver\": \"qcow2\", $f, \"l2-cache-size\": 99999999999999999999}" \
    "{\"driver\": \"qcow2\", $f, \"l2-cache-size\": 18446744073709551615}" \
    "{\"driver\": \"qcow2\", $f, \"l2-cache-size\": 1e3}" \
    "{\"driver\": \"qcow2\", $f, \"l2-cache-size\": 65536.0}" \
    '{"file": {"driver": "file", "filename": "a.qcow2", "locking": null}}' \
    '{"file": {"driver": "file", "filename": "a.qcow2", "aio": null}}' \
    '{"file": {"driver": "file", "filename": "a.qcow2", "node-name": null}}' \
    '{"file": {"driver": "file", "filename": "a.qcow2", "bogus": null}}' \
    "{\"driver\": \"qcow2\", $f, \"read-only\": null}" \
    "{\"driver\": \"qcow2\", $f, \"l2-cache-size\": null}" \
    "{\"driver\": \"qcow2\", $f, \"node-name\": null}" \
    "{\"driver\": \"qcow2\", $f, \"data-file\": null}" \
    "{\"driver\": \"qcow2\", $f, \"discard\": null}" \
    "{\"driver\": \"qcow2\", $f, \"overlap-check\": null}" \
    "{\"driver\": \"qcow2\", $f, \"cache\": {\"direct\": null}}" \
    "{\"driver\": \"qcow2\", $f, \"cache\": null}" \
    "{\"driver\": \"qcow2\", $f, \"bogus\": null}" \
    "{\"driver\": \"raw\", $f, \"l2-cache-size\": null}"; do
    same_as_qemu_err info "json:$j"
    same_as_qemu_io "qemu-io json:$j" -c 'read -P 9 0 4k' "json:$j"
done

finish
