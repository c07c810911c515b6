#!/usr/bin/env python3
"""iotests/nbd_oldstyle.py SOCKET SIZE FLAGS [--drop-after-data]

A minimal NBD server with the oldstyle handshake (the NBD protocol's
"oldstyle negotiation"), for tests of how a client reads it: it listens on
the Unix socket SOCKET, sends the handshake with the export's SIZE and the
32 bits of flags FLAGS (0: none, not even NBD_FLAG_HAS_FLAGS, as QEMU's
nbd-fault-injector sends them), and serves reads and writes from memory
until the client disconnects, then ends.  With --drop-after-data the first
connection is closed once the data of its first write has arrived, before
the reply (a server that died in the middle of a request), and the server
waits for the client to connect again.  Prints "listening" when clients
can connect and a line for the dropped connection.
"""
import socket
import struct
import sys

NBD_MAGIC = 0x4E42444D41474943  # "NBDMAGIC"
OLD_MAGIC = 0x00420281861253
REQ_MAGIC = 0x25609513
REPLY_MAGIC = 0x67446698
CMD_READ, CMD_WRITE, CMD_DISC = 0, 1, 2
EINVAL = 22


def recv_all(conn, n):
    buf = b''
    while len(buf) < n:
        part = conn.recv(n - len(buf))
        if not part:
            return None
        buf += part
    return buf


def serve(conn, disk, flags, drop):
    """One client; True when it was dropped after its first write's data."""
    conn.sendall(struct.pack('>QQQI124x', NBD_MAGIC, OLD_MAGIC, len(disk), flags))
    while True:
        req = recv_all(conn, 28)
        if req is None:
            return False
        magic, _, typ, handle, off, length = struct.unpack('>IHHQQI', req)
        if magic != REQ_MAGIC or typ == CMD_DISC:
            return False
        ok = off + length <= len(disk)
        if typ == CMD_WRITE:
            data = recv_all(conn, length)
            if data is None:
                return False
            if drop:
                return True
            if ok:
                disk[off:off + length] = data
            conn.sendall(struct.pack('>IIQ', REPLY_MAGIC, 0 if ok else EINVAL, handle))
        elif typ == CMD_READ and ok:
            conn.sendall(struct.pack('>IIQ', REPLY_MAGIC, 0, handle) + disk[off:off + length])
        else:
            conn.sendall(struct.pack('>IIQ', REPLY_MAGIC, EINVAL, handle))


def main():
    path, size, flags = sys.argv[1], int(sys.argv[2]), int(sys.argv[3], 0)
    drop = '--drop-after-data' in sys.argv[4:]
    disk = bytearray(size)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    print('listening', flush=True)
    while True:
        conn, _ = srv.accept()
        with conn:
            dropped = serve(conn, disk, flags, drop)
        if not dropped:
            break
        print('dropped the connection after the write data', flush=True)
        drop = False
    srv.close()


if __name__ == '__main__':
    main()
