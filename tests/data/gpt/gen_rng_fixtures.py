#!/usr/bin/env python3
"""Writes rng.txt: reference outputs of numpy's RandomState (MT19937) and default_rng (PCG64)
for test_data_mt.c. Run once by hand (the output is committed; CI never runs this):
    pip install numpy        # numpy 2.4.6 was used
    python3 tests/data/gpt/gen_rng_fixtures.py tests/data/gpt/rng.txt
Lines:
    mt32 <seed> <first 16 outputs of RandomState(seed).randint(0, 2**32, dtype=uint64)...>
    shuffle <seed> <n> <RandomState(seed).shuffle(arange(n)) result...>
    shuffle2 <seed> <n1> <n2> <two successive shuffles from one RandomState: n1 values, n2 values>
    integers <seed> <low> <high> <count> <checksum> <first 32 values...>
checksum = sum((i + 1) * v) mod 2**64 over all values, the same weighting the C test uses.
"""
import sys

import numpy


def checksum(values):
    return sum((i + 1) * int(v) for i, v in enumerate(values)) % (1 << 64)


def main(out):
    lines = []
    for seed in (0, 1, 1234, 4294967295):
        rs = numpy.random.RandomState(seed)
        # randint over the full uint32 range returns raw 32-bit outputs (masked draw, mask all-ones)
        vals = rs.randint(0, 2**32, size=16, dtype=numpy.uint64)
        lines.append("mt32 %d %s" % (seed, " ".join(str(int(v)) for v in vals)))
    for seed, n in ((1234, 1), (1234, 2), (1234, 10), (0, 37), (42, 1000), (7, 3000)):
        x = numpy.arange(n, dtype=numpy.int32)
        numpy.random.RandomState(seed).shuffle(x)
        lines.append("shuffle %d %d %s" % (seed, n, " ".join(map(str, x.tolist()))))
    rs = numpy.random.RandomState(99)
    a = numpy.arange(50, dtype=numpy.int32)
    b = numpy.arange(30, dtype=numpy.uint32)
    rs.shuffle(a)
    rs.shuffle(b)
    lines.append("shuffle2 99 50 30 %s %s" % (" ".join(map(str, a.tolist())), " ".join(map(str, b.tolist()))))
    for seed, low, high, count in ((0, 1, 4096, 100000), (5, 0, 7, 1000), (123, 1, 2, 10)):
        v = numpy.random.default_rng(seed).integers(low=low, high=high, size=count, dtype=numpy.int32)
        lines.append("integers %d %d %d %d %d %s" % (seed, low, high, count, checksum(v), " ".join(map(str, v[:32].tolist()))))
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
