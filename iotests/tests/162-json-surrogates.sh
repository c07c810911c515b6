#!/bin/bash
# 162-json-surrogates: a json: name whose strings hold a \u escape QEMU's
# parser refuses (json-parse.c facts 4, 5): a UTF-16 surrogate outside a
# high+low pair, four characters that are not hex digits, a noncharacter
# (alone or as a pair) -- as the caller's name and as the backing file
# name an image from a stranger names.  qimg refuses it with qemu-img's
# message ("JSON parse error, \ud83d is not a valid Unicode character"),
# where json-glib leaked its string buffer (what it read as a high
# surrogate before another \u escape) or took the escape into the file
# name as bytes that are not UTF-8; a real pair, and an escape of a valid
# character, name the file as in qemu-img.  And a text that is more than
# one JSON value (json-parse.c fact 3; json-glib took "{}{}" and
# leaked): qemu-img's "Expecting at most one JSON value".  And a string's
# raw bytes and other escapes (json-parse.c facts 1, 4, 5): a control character or 0xFE/
# 0xFF is the lexer's "stray" token, a bad escape or a byte that is not
# modified UTF-8 of a valid character the parser's message, and U+0000
# (\u0000 or C0 80) is C0 80 in the file name where json-glib ended the
# name there (a backing name "base\u0000x.raw" opened base).  And the
# text's structure: every message of QEMU's JSON reader (json-parse.c; the
# json-glib parser qimg used gave its own).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

"$QEMU_IMG" create -q -f raw 'base🐀.raw' 1M || exit 1
"$QEMU_IO" -f raw -c 'write -P 0x5a 0 4k' 'base🐀.raw' >/dev/null || exit 1

for esc in '\ud83d\u0041' '\ud83d\ud83d' '\uD83Dx' '\udc00' '\ud83d\u' '\ud83d\udc00' \
    '\uzzzz' '\ude0' '\u004(' '\ufffe' '\ud83f\udffe' '\u00e9'; do
    name="json:{\"driver\":\"raw\",\"file\":{\"driver\":\"file\",\"filename\":\"base$esc.raw\"}}"
    # the caller's name
    same_as_qemu_err info "$name"
    # a backing file name from the image
    rm -f top.qcow2
    "$QEMU_IMG" create -q -f qcow2 -u -b "$name" -F raw top.qcow2 1M || exit 1
    same_as_qemu_err info --backing-chain top.qcow2
    same_as_qemu_io "read through a backing name with $esc" -c 'read -P 0x5a 0 4k' top.qcow2
done
# single quotes, QEMU's other form
same_as_qemu_err info "json:{'driver':'raw','file':{'filename':'base\\ud83d.raw'}}"

# more than one JSON value
for extra in '{}' ' 7' ']' ',' 'x'; do
    same_as_qemu_err info "json:{\"driver\":\"raw\",\"file\":{\"driver\":\"file\",\"filename\":\"base.raw\"}}$extra"
    rm -f top.qcow2
    "$QEMU_IMG" create -q -f qcow2 -u -b "json:{\"file\":{\"filename\":\"}{\"}}$extra" -F raw top.qcow2 1M ||
        exit 1
    same_as_qemu_err info --backing-chain top.qcow2
done
same_as_qemu_err info "json:7{\"driver\":\"raw\"}"

# a string's bytes and escapes; "base" exists, so a name cut at U+0000
# would open it
"$QEMU_IMG" create -q -f raw base 1M || exit 1
"$QEMU_IMG" create -q -f raw $'base\xc0\x80x' 1M || exit 1
"$QEMU_IO" -f raw -c 'write -P 0x6b 0 4k' $'base\xc0\x80x' >/dev/null || exit 1
for s in '\u0000x' $'\xc0\x80x' $'\x01x' $'\\\x1f' $'\\u\x01' $'\xfe' $'\xff' '\q' $'\\\xc3\xa9' \
    $'\x80' $'\xc3' $'\xc1\xbf' $'\xe0\x80\x80' $'\xed\xa0\x80' $'\xf4\x90\x80\x80' $'\xef\xb7\x90' \
    $'\xef\xbf\xbe' '\/\u00e9' $'\xf0\x9f\x90\x80'; do
    for q in '"' "'"; do
        name="json:{${q}driver${q}:${q}raw${q},${q}file${q}:{${q}driver${q}:${q}file${q},${q}filename${q}:${q}base$s${q}}}"
        same_as_qemu_err info "$name"
    done
    rm -f top.qcow2
    "$QEMU_IMG" create -q -f qcow2 -u -b "$name" -F raw top.qcow2 1M || exit 1
    same_as_qemu_io "read through a backing name with $(printf %q "$s")" -c 'read -P 0x6b 0 4k' top.qcow2
done

# the text's structure, QEMU's lexer, streamer and parser (json-parse.c
# facts 1-4): each message as qemu-img's, for the caller's name and for a
# backing name
for j in '}{' '{' '{"a"}' '{"a":}' '{"a":1,}' '{1:2}' '{"a" 1}' '{"a":1 "b":2}' '[' '[1,]' \
    '[1 2]' '' ' ' '{"a":tru}' '{"a":@}' '{"a":-}' '{"a":01}' '{"a":"x}' '{"a":[}' ']' \
    '{"a":1,"a":2}' '{"a":1}@' '@{"a":1}' '{"a":1.}' '{"a":1e}' '{"a":1e+}' '{"a":12ab}' \
    '{"a":tr' '%' "{'a':'b'" '[]' '1' '"x"' $'{"a":1\xc3\xa9}' $'{"a":\xff}' \
    '{"driver":"raw","file":{"driver":"file","filename":"base"},"x":[1,{"y":null}]}'; do
    same_as_qemu_err info "json:$j"
    rm -f top.qcow2
    "$QEMU_IMG" create -q -f qcow2 -u -b "json:$j" -F raw top.qcow2 1M || exit 1
    same_as_qemu_err info --backing-chain top.qcow2
done
# deeper than QEMU's 1024 levels
deep=$(printf '[%.0s' $(seq 1025))$(printf ']%.0s' $(seq 1025))
same_as_qemu_err info "json:{\"a\":$deep}"

finish
