"""The crash-state explorer's LUKS1 reader (crash.py, workload.py).

Encrypted images (--luks-secret PASS): the checks open the image with the
secret (qemu-img --object secret --image-opts), and the log's writes are
decrypted here -- by a LUKS1 reader of its own (Python's hashlib for PBKDF2
and the anti-forensic merge, the cryptography package's AES), independent
of qimg's and QEMU's -- to find the markers; --no-plaintext fails the run
when any workload tag appears in the log in the clear.
"""
import hashlib
import struct

from workload import SECTOR


class Luks:
    """The master key of a qcow2 image's LUKS header (--luks-secret), and
    sector decryption with it (IVs: the host sector, as qcow2's LUKS).
    AES in XTS or CBC mode, plain/plain64/ESSIV IVs."""

    def __init__(self, image, passphrase):
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
        self.Cipher, self.algorithms, self.modes = Cipher, algorithms, modes
        b = open(image, "rb").read()
        o = struct.unpack(">I", b[100:104])[0]
        while True:
            t, ln = struct.unpack(">II", b[o:o + 8])
            if t == 0x0537be77:
                area = struct.unpack(">Q", b[o + 8:o + 16])[0]
                break
            if t == 0:
                raise ValueError("no LUKS header extension in " + image)
            o += 8 + ((ln + 7) & ~7)
        h = b[area:area + 592]
        name = h[8:40].rstrip(b"\0").decode()
        mode = h[40:72].rstrip(b"\0").decode()
        self.hash = h[72:104].rstrip(b"\0").decode()
        self.key_bytes = struct.unpack(">I", h[108:112])[0]
        digest, mk_salt = h[112:132], h[132:164]
        mk_iters = struct.unpack(">I", h[164:168])[0]
        if name != "aes":
            raise ValueError("cipher %s: the reader has AES only" % name)
        self.mode, iv = mode.split("-", 1)
        self.ivgen, _, ivhash = iv.partition(":")
        pw = passphrase.encode()
        for i in range(8):
            s = h[208 + 48 * i:256 + 48 * i]
            active, iters = struct.unpack(">II", s[:8])
            if active != 0x00ac71f3:
                continue
            salt, key_off, stripes = s[8:40], *struct.unpack(">II", s[40:48])
            self.set_key(hashlib.pbkdf2_hmac(self.hash, pw, salt, iters, self.key_bytes),
                         ivhash)
            n = (self.key_bytes * stripes + SECTOR - 1) // SECTOR * SECTOR
            mat = self.decrypt(b[area + key_off * SECTOR:area + key_off * SECTOR + n], 0)
            mk = self.af_merge(mat, stripes)
            if hashlib.pbkdf2_hmac(self.hash, mk, mk_salt, mk_iters, 20) == digest:
                self.set_key(mk, ivhash)
                return
        raise ValueError("the passphrase opens no key slot of " + image)

    def set_key(self, key, ivhash):
        self.key = key
        if self.ivgen == "essiv":
            salt = hashlib.new(ivhash, key).digest()
            self.essiv = self.Cipher(self.algorithms.AES(salt), self.modes.ECB()).encryptor()

    def af_merge(self, mat, stripes):
        n, d = self.key_bytes, bytearray(self.key_bytes)
        ds = hashlib.new(self.hash).digest_size
        for i in range(stripes - 1):
            d = bytearray(x ^ y for x, y in zip(d, mat[i * n:(i + 1) * n]))
            out = bytearray()
            for j in range(0, n, ds):  # diffuse
                part = d[j:j + ds]
                out += hashlib.new(self.hash, struct.pack(">I", j // ds) + part).digest()[
                    :len(part)]
            d = out
        return bytes(x ^ y for x, y in zip(d, mat[(stripes - 1) * n:stripes * n]))

    def decrypt(self, data, sector):
        out = bytearray()
        for k in range(0, len(data) - len(data) % SECTOR, SECTOR):
            n = sector + k // SECTOR
            iv = struct.pack("<Q", n & (0xffffffff if self.ivgen == "plain" else
                                        0xffffffffffffffff)) + bytes(8)
            if self.ivgen == "essiv":
                iv = self.essiv.update(iv)
            m = self.modes.XTS(iv) if self.mode == "xts" else self.modes.CBC(iv)
            d = self.Cipher(self.algorithms.AES(self.key), m).decryptor()
            out += d.update(data[k:k + SECTOR]) + d.finalize()
        return bytes(out)

