#!/bin/bash
# 184-blkdebug-top-name: the name of a blkdebug node opened as the image
# itself over a format or a protocol ("driver": "blkdebug" with
# image.driver), as qemu-img 7.2 prints it (api/json-blkdebug.c invariant
# 6, QEMU's blkdebug_refresh_filename): "blkdebug:CONFIG:IMAGE" when its
# only option is config and its image has a plain name (QEMU iotest 162's
# "blkdebug:42:null-co://"), else a json: name of its options with the
# image's options as an object, the JSON types as given; and the config
# option's JSON type in the json: name of a blkdebug node under a format.
. "${0%/*}/../common.sh"
requires qimg qemu-img

"$QEMU_IMG" create -q -f qcow2 t.qcow2 1M || exit 1
touch 42 # an empty config file: no rules
# info_image ARGS...: qemu-img info's "image:" line (as QEMU's 162 greps
# it; the node's other lines are not this test's) and exit code
info_image() {
    run_both info "$@"
    assert_eq "$*: exit code" "$Q_RC" "$M_RC"
    assert_eq "$*: name" "$(grep '^image:' <<<"$Q_OUT")" "$(grep '^image:' <<<"$M_OUT")"
}

# the plain name: config only
info_image 'json:{"driver": "blkdebug", "config": 42, "image.driver": "null-co"}'
info_image 'json:{"driver": "blkdebug", "config": "42", "image.driver": "null-co"}'
info_image 'json:{"driver": "blkdebug", "image.driver": "null-co"}'
info_image 'json:{"driver": "blkdebug", "config": 42, "image": {"driver": "qcow2", "file": {"driver": "file", "filename": "t.qcow2"}}}'
info_image 'json:{"driver": "blkdebug", "config": 42, "image.driver": "qcow2", "image.file.filename": "t.qcow2"}'
info_image --image-opts driver=blkdebug,config=42,image.driver=qcow2,image.file.filename=t.qcow2

# the json: name: other options, or an image without a plain name
info_image 'json:{"driver": "blkdebug", "config": 42, "image.driver": "qcow2", "image.file.filename": "t.qcow2", "align": 512}'
info_image 'json:{"driver": "blkdebug", "image.driver": "null-co", "align": 512}'
info_image 'json:{"driver": "blkdebug", "image.driver": "null-co", "image.size": 512}'
info_image --image-opts driver=blkdebug,config=42,image.driver=qcow2,image.file.filename=t.qcow2,max-transfer=65536

# under a format: config keeps the JSON type it was given
info_image 'json:{"driver": "qcow2", "file": {"driver": "blkdebug", "config": 42, "image.filename": "t.qcow2", "align": 512}}'
info_image 'json:{"driver": "qcow2", "file": {"driver": "blkdebug", "config": "42", "image.filename": "t.qcow2", "align": 512}}'

finish
