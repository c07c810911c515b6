#!/usr/bin/env python3
"""iotests/nbd_hostile.py SOCKET MODE [SIZE]

An NBD server that misbehaves, for tests of how a client survives one: it
listens on the Unix socket SOCKET, does the fixed newstyle handshake (or
breaks it, as MODE says), serves an export of SIZE bytes (default 1 MiB)
of 0x5a bytes from memory, and breaks the transmission phase as MODE says.
Each connection is served in turn until the server is killed.  Prints
"listening" when clients can connect, and "MODE: what it did" each time it
misbehaved, so that a test knows the client got that far.

Modes, handshake:
  hs-close-greeting  close right after the first 8 bytes of the greeting
  hs-close-options   close once the client sent its first option
  hs-silent          accept, then send nothing and wait
  hs-huge-option     answer the first option with a reply of 4 GiB - 1 bytes
                     (the header only, then wait)
  hs-huge-size       an export of 2^64 - 1 bytes
Modes, transmission (structured replies are offered unless the mode says
simple; the first read request misbehaves, every other request is served):
  bad-cookie         reply to the read with another cookie (simple reply)
  bad-cookie-sr      the same, as a structured reply (an error chunk)
  short-read         structured: data for half the read, flagged done
  short-read-simple  simple reply: half the data, then close
  huge-chunk         structured: an OFFSET_DATA chunk of 4 GiB - 1 bytes
                     (the header only, then wait)
  huge-error         structured: an ERROR chunk whose message is 4 GiB - 1
                     bytes (the header only, then wait)
  silent-read        never answer the read
  well               no misbehaviour (the control)
Modes, block status (base:allocation is offered; the first block status
request misbehaves, the export is all data):
  bs-zero-extent     one extent of length 0
  bs-unknown-id      extents for a context id never given
  bs-huge            a block status chunk of 4 GiB - 1 bytes (the header
                     only, then wait)
"""
import socket
import struct
import sys

from nbd_oldstyle import recv_all  # the same reading of n bytes or None

NBD_MAGIC = 0x4E42444D41474943  # "NBDMAGIC"
IHAVEOPT = 0x49484156454F5054
REPLY_MAGIC_OPT = 0x3E889045565A9
REQ_MAGIC = 0x25609513
SIMPLE_MAGIC = 0x67446698
STRUCT_MAGIC = 0x668E33EF
FLAG_FIXED_NEWSTYLE, FLAG_NO_ZEROES = 1, 2
OPT_EXPORT_NAME, OPT_ABORT, OPT_GO, OPT_STRUCTURED_REPLY = 1, 2, 7, 8
OPT_SET_META_CONTEXT = 10
REP_ACK, REP_INFO, REP_META_CONTEXT = 1, 3, 4
META_ID = 1
BASE_ALLOCATION = b'base:allocation'
REP_ERR_UNSUP = (1 << 31) | 1
INFO_EXPORT = 0
EFLAGS = 1 | (1 << 2)  # HAS_FLAGS, SEND_FLUSH
CMD_READ, CMD_WRITE, CMD_DISC, CMD_FLUSH, CMD_BLOCK_STATUS = 0, 1, 2, 3, 7
CHUNK_DONE = 1
CHUNK_OFFSET_DATA, CHUNK_BLOCK_STATUS, CHUNK_ERROR = 1, 5, (1 << 15) | 1
EINVAL = 22
HUGE = 0xFFFFFFFF


def log(msg):
    print(msg, flush=True)


def wait_close(conn):
    """Sends nothing more; reads (and drops) until the client leaves."""
    while conn.recv(65536):
        pass


def opt_reply(conn, opt, rep, data=b''):
    conn.sendall(struct.pack('>QIII', REPLY_MAGIC_OPT, opt, rep, len(data)) + data)


def handshake(conn, mode, size):
    """The export's size and whether replies are structured; None when the
    mode ended the connection here."""
    if mode == 'hs-silent':
        log('hs-silent: sent nothing')
        wait_close(conn)
        return None
    greeting = struct.pack('>QQH', NBD_MAGIC, IHAVEOPT, FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES)
    if mode == 'hs-close-greeting':
        conn.sendall(greeting[:8])
        log('hs-close-greeting: closed after 8 bytes')
        return None
    conn.sendall(greeting)
    cflags = recv_all(conn, 4)
    if cflags is None:
        return None
    zeroes = not struct.unpack('>I', cflags)[0] & FLAG_NO_ZEROES
    structured = False
    first = True
    while True:
        hdr = recv_all(conn, 16)
        if hdr is None:
            return None
        magic, opt, length = struct.unpack('>QII', hdr)
        data = recv_all(conn, length) if length else b''
        if magic != IHAVEOPT or data is None:
            return None
        if first and mode == 'hs-close-options':
            log('hs-close-options: closed at option %d' % opt)
            return None
        if first and mode == 'hs-huge-option':
            conn.sendall(struct.pack('>QIII', REPLY_MAGIC_OPT, opt, REP_ACK, HUGE))
            log('hs-huge-option: sent a reply of %d bytes to option %d' % (HUGE, opt))
            wait_close(conn)
            return None
        first = False
        if opt == OPT_STRUCTURED_REPLY and 'simple' not in mode and mode != 'bad-cookie':
            structured = True
            opt_reply(conn, opt, REP_ACK)
        elif opt == OPT_SET_META_CONTEXT and structured and mode.startswith('bs-'):
            if BASE_ALLOCATION in data:
                opt_reply(conn, opt, REP_META_CONTEXT, struct.pack('>I', META_ID) + BASE_ALLOCATION)
            opt_reply(conn, opt, REP_ACK)
        elif opt == OPT_GO:
            opt_reply(conn, opt, REP_INFO, struct.pack('>HQH', INFO_EXPORT, size, EFLAGS))
            opt_reply(conn, opt, REP_ACK)
            return size, structured
        elif opt == OPT_EXPORT_NAME:
            conn.sendall(struct.pack('>QH', size, EFLAGS) + (b'\0' * 124 if zeroes else b''))
            return size, structured
        elif opt == OPT_ABORT:
            opt_reply(conn, opt, REP_ACK)
            return None
        else:
            opt_reply(conn, opt, REP_ERR_UNSUP)


def simple(conn, cookie, err=0, data=b''):
    conn.sendall(struct.pack('>IIQ', SIMPLE_MAGIC, err, cookie) + data)


def chunk(conn, cookie, flags, typ, payload, length=None):
    if length is None:
        length = len(payload)
    conn.sendall(struct.pack('>IHHQI', STRUCT_MAGIC, flags, typ, cookie, length) + payload)


def misbehave(conn, mode, cookie, off, length):
    """The first read's reply, as MODE breaks it; False: serve it well."""
    if mode in ('bad-cookie', 'bad-cookie-sr'):
        if mode == 'bad-cookie':
            simple(conn, cookie + 1, 0, b'\x5a' * length)
        else:
            msg = b'not yours'
            chunk(conn, cookie + 1, CHUNK_DONE, CHUNK_ERROR,
                  struct.pack('>IH', EINVAL, len(msg)) + msg)
        log('%s: replied with cookie %d for %d' % (mode, cookie + 1, cookie))
    elif mode == 'short-read':
        chunk(conn, cookie, CHUNK_DONE, CHUNK_OFFSET_DATA,
              struct.pack('>Q', off) + b'\x5a' * (length // 2))
        log('short-read: sent %d of %d bytes, done' % (length // 2, length))
    elif mode == 'short-read-simple':
        simple(conn, cookie, 0, b'\x5a' * (length // 2))
        log('short-read-simple: sent %d of %d bytes, closed' % (length // 2, length))
        return 'close'
    elif mode in ('huge-chunk', 'huge-error'):
        typ = CHUNK_OFFSET_DATA if mode == 'huge-chunk' else CHUNK_ERROR
        chunk(conn, cookie, CHUNK_DONE, typ, b'', HUGE)
        log('%s: sent a chunk header of %d bytes' % (mode, HUGE))
        return 'wait'
    elif mode == 'silent-read':
        log('silent-read: got the read, no answer')
        return 'wait'
    else:
        return False
    return True


def status_misbehave(conn, mode, cookie, length):
    """The first block status reply, as MODE breaks it; True: then wait."""
    if mode == 'bs-zero-extent':
        chunk(conn, cookie, CHUNK_DONE, CHUNK_BLOCK_STATUS, struct.pack('>III', META_ID, 0, 0))
        log('bs-zero-extent: sent an extent of length 0')
    elif mode == 'bs-unknown-id':
        chunk(conn, cookie, CHUNK_DONE, CHUNK_BLOCK_STATUS,
              struct.pack('>III', META_ID + 7, length, 0))
        log('bs-unknown-id: sent context id %d' % (META_ID + 7))
    else:
        chunk(conn, cookie, CHUNK_DONE, CHUNK_BLOCK_STATUS, b'', HUGE)
        log('bs-huge: sent a block status chunk of %d bytes' % HUGE)
        return True
    return False


def serve(conn, mode, size):
    got = handshake(conn, mode, size)
    if got is None:
        return
    size, structured = got
    broke = False
    while True:
        req = recv_all(conn, 28)
        if req is None:
            return
        magic, _, typ, cookie, off, length = struct.unpack('>IHHQQI', req)
        if magic != REQ_MAGIC or typ == CMD_DISC:
            return
        ok = off + length <= size and length <= (32 << 20)
        if typ == CMD_WRITE:
            if recv_all(conn, length) is None:
                return
        if typ == CMD_BLOCK_STATUS and mode.startswith('bs-'):
            if not broke and ok:
                broke = True
                if status_misbehave(conn, mode, cookie, length):
                    wait_close(conn)
                    return
                continue
            chunk(conn, cookie, CHUNK_DONE, CHUNK_BLOCK_STATUS,
                  struct.pack('>III', META_ID, length, 0))
            continue
        if typ == CMD_READ and ok and not broke and mode != 'well' and not mode.startswith('bs-'):
            broke = True
            what = misbehave(conn, mode, cookie, off, length)
            if what == 'close':
                return
            if what == 'wait':
                wait_close(conn)
                return
            if what:
                continue
        err = 0 if ok and typ in (CMD_READ, CMD_WRITE, CMD_FLUSH) else EINVAL
        data = b'\x5a' * length if typ == CMD_READ and not err else b''
        if structured and typ == CMD_READ and not err:
            chunk(conn, cookie, CHUNK_DONE, CHUNK_OFFSET_DATA, struct.pack('>Q', off) + data)
        elif structured and err:
            chunk(conn, cookie, CHUNK_DONE, CHUNK_ERROR, struct.pack('>IH', err, 0))
        elif structured:
            chunk(conn, cookie, CHUNK_DONE, 0, b'')
        else:
            simple(conn, cookie, err, data)


def main():
    path, mode = sys.argv[1], sys.argv[2]
    size = int(sys.argv[3]) if len(sys.argv) > 3 else 1 << 20
    if mode == 'hs-huge-size':
        size = (1 << 64) - 1
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(4)
    log('listening')
    while True:
        conn, _ = srv.accept()
        with conn:
            try:
                serve(conn, mode, size)
            except (BrokenPipeError, ConnectionResetError):
                pass


if __name__ == '__main__':
    main()
