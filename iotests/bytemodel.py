#!/usr/bin/env python3
"""The byte model of a disk's contents for the random I/O tests (012, 176):
runs of bytes, starts[i] .. starts[i + 1] holding vals[i] (a byte value,
or None = unknown), over [0, size).

    m = Model(size, 0)        # everything reads as zeros
    m.assign(off, n, 0x5b)    # a write of pattern 0x5b
    m.known_value(off, n)     # the one known byte value there, or None
    m.runs()                  # (start, length, value) of every run
    m.command(rnd, r, off, n) # a random qemu-io command, the model updated
"""
import bisect


class Model:
    def __init__(self, size, initial):
        self.size = size
        self.starts, self.vals = [0], [initial]

    def split(self, x):
        """A run boundary at x; its index."""
        if x >= self.size:
            return len(self.starts)
        i = bisect.bisect_right(self.starts, x) - 1
        if self.starts[i] == x:
            return i
        self.starts.insert(i + 1, x)
        self.vals.insert(i + 1, self.vals[i])
        return i + 1

    def assign(self, off, n, v):
        i = self.split(off)
        j = self.split(off + n)
        self.starts[i:j] = [off]
        self.vals[i:j] = [v]

    def known_value(self, off, n):
        i = bisect.bisect_right(self.starts, off) - 1
        j = bisect.bisect_left(self.starts, off + n)
        vs = set(self.vals[i:j])
        return vs.pop() if len(vs) == 1 else None

    def runs(self):
        ends = self.starts[1:] + [self.size]
        return [(s, e - s, v) for s, e, v in zip(self.starts, ends, self.vals)]

    def copy(self):
        m = Model(self.size, None)
        m.starts, m.vals = self.starts[:], self.vals[:]
        return m

    def command(self, rnd, r, off, n):
        """The qemu-io command for the draw r in [0, 1) over [off, off + n),
        the model updated: 45% write -P, 15% write -z [-u], 10% discard,
        5% flush, 25% read (-P where the model knows the bytes)."""
        if r < 0.45:
            p = rnd.randint(1, 255)
            self.assign(off, n, p)
            return "write -P %d %d %d" % (p, off, n)
        if r < 0.6:
            self.assign(off, n, 0)
            return "write -z%s %d %d" % (" -u" if rnd.random() < 0.5 else "", off, n)
        if r < 0.7:
            # what a discard leaves depends on the format: unknown
            self.assign(off, n, None)
            return "discard %d %d" % (off, n)
        if r < 0.75:
            return "flush"
        v = self.known_value(off, n)
        if v is not None:
            return "read -P %d %d %d" % (v, off, n)
        return "read -q %d %d" % (off, n)
