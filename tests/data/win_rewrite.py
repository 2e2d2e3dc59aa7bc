#!/usr/bin/env python3
"""win_rewrite.py FILE FORM: rewrite one committed prep window file
(<output>/.prep_work/win_*.bin) in another of the layouts phase 2 must read,
from the format as src/data/prep_out.c and docs/data-format.md describe it:

  "FMWIN3\\0" B (bytes per token id) or "FMWIN2\\0\\0" (B = 4), int64 R,
  has_pos, NSTAT, stats[NSTAT] (rows_train, rows_valid the last two), per
  split int64 nsegs, mask_stored; then per split: tokens uB (rows x R),
  segments per row i32 (rows), segment lengths i32 (nsegs), loss_mask u8
  (rows x R) when mask_stored.

FORM: v2 (FMWIN2, u32 ids: what fmhpc wrote before FMWIN3), v3w2 / v3w4
(FMWIN3, u16 / u32 ids), or badw3 (FMWIN3 with B = 3, which must be refused).
Prints FILE's form before and after. Exits 1 when the file does not parse
exactly (every byte accounted for) or an id does not fit u16 for v3w2."""
import struct
import sys

import numpy as np


def parse(buf):
    magic = buf[:8]
    if magic == b"FMWIN2\0\0":
        form, B = "v2", 4
    elif magic[:7] == b"FMWIN3\0" and magic[7] in (2, 4):
        B = magic[7]
        form = "v3w%d" % B
    else:
        sys.exit("not a window file: magic %r" % magic)
    R, has_pos, nstat = struct.unpack_from("<3q", buf, 8)
    o = 8 + 24
    stats = struct.unpack_from("<%dq" % nstat, buf, o)
    o += 8 * nstat
    sec = struct.unpack_from("<4q", buf, o)
    o += 32
    head = buf[8:o]
    rows = stats[-2:]
    splits = []
    for s in range(2):
        n = rows[s] * R
        nsegs, masked = sec[2 * s], sec[2 * s + 1]
        dt = np.uint16 if B == 2 else np.uint32
        tok = np.frombuffer(buf, dtype=dt, count=n, offset=o).astype(np.uint32)
        o += n * B
        rest = (rows[s] + nsegs) * 4 + (n if masked else 0)
        splits.append((tok, buf[o:o + rest]))
        o += rest
    if o != len(buf):
        sys.exit("window file of %d bytes, the layout accounts for %d" % (len(buf), o))
    return form, head, splits


def main():
    path, form = sys.argv[1], sys.argv[2]
    buf = open(path, "rb").read()
    old, head, splits = parse(buf)
    magic = {"v2": b"FMWIN2\0\0", "v3w2": b"FMWIN3\0\x02", "v3w4": b"FMWIN3\0\x04", "badw3": b"FMWIN3\0\x03"}[form]
    out = [magic, head]
    for tok, rest in splits:
        if form == "v3w2":
            if tok.size and int(tok.max()) > 0xFFFF:
                sys.exit("id %d does not fit u16" % int(tok.max()))
            out.append(tok.astype("<u2").tobytes())
        else:  # badw3 keeps u32 ids: only its width byte is wrong
            out.append(tok.astype("<u4").tobytes())
        out.append(rest)
    open(path, "wb").write(b"".join(out))
    print("%s: %s -> %s (%d ids)" % (path.rsplit("/", 1)[-1], old, form, sum(t.size for t, _ in splits)))


if __name__ == "__main__":
    main()
