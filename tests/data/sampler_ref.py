#!/usr/bin/python3
"""sampler_ref.py: an independent Python model of the sampler (DESIGN section
7, include/fmhpc/data.h): Philox4x32-10 keyed by (seed, FM_RNG_DATA=2, epoch,
round<<32 | R), a 6-round balanced Feistel network on 2h bits (4^h >= n),
cycle walking down to n. Prints the values tests/unit/test_sampler.c asserts."""
import sys

M = 0xFFFFFFFF


def philox(seed, purpose, step, index):
    c = [index & M, index >> 32, step & M, purpose]
    k0, k1 = seed & M, seed >> 32
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [((p1 >> 32) ^ c[1] ^ k0) & M, p1 & M, ((p0 >> 32) ^ c[3] ^ k1) & M, p0 & M]
        k0, k1 = (k0 + 0x9E3779B9) & M, (k1 + 0xBB67AE85) & M
    return c


def perm(seed, epoch, n, i):
    if n <= 1:
        return 0
    h = 1
    while h < 32 and (1 << (2 * h)) < n:
        h += 1
    mask = (1 << h) - 1
    x = i
    while True:
        L, R = x >> h, x & mask
        for r in range(6):
            b = philox(seed, 2, epoch, (r << 32) | R)
            f = ((b[1] << 32) | b[0]) & mask
            L, R = R, L ^ f
        x = (L << h) | R
        if x < n:
            return x


if __name__ == "__main__":
    print("perm(1234, 0, 10):", [perm(1234, 0, 10, i) for i in range(10)])
    print("perm(1234, 1, 10):", [perm(1234, 1, 10, i) for i in range(10)])
    print("perm(7, 3, 1000003) at 0, 1, 999999:", [perm(7, 3, 1000003, i) for i in (0, 1, 999999)])
    N, B = 10, 4
    print("slots step 0..3 (N=10, B=4, seed 1234):", [perm(1234, (s * B + j) // N, N, (s * B + j) % N)
                                                     for s in range(4) for j in range(B)])
