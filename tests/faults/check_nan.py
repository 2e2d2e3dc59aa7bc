"""check_nan.py A.h5 B.h5: two checkpoints of one run around skipped steps
(tests/faults/faults.sh). Every parameter and optimizer-state dataset is
bit-identical (a skipped step changes nothing), and every dataset of B,
/reduce/amax_prev included, is finite. With one file, only the finiteness."""
import sys

import h5py
import numpy as np


def datasets(f):
    out = {}
    f.visititems(lambda n, o: out.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
    return out


b = datasets(h5py.File(sys.argv[-1], "r"))
n = 0
for name, v in b.items():
    if v.dtype.kind == "f":
        assert np.isfinite(v).all(), f"{sys.argv[-1]}: {name} holds NaN/Inf"
        n += 1
assert "reduce/amax_prev" in b and n > 10, f"only {n} float datasets"
print(f"finite: {n} float datasets of {sys.argv[-1]}, reduce/amax_prev included")
if len(sys.argv) == 3:
    a = datasets(h5py.File(sys.argv[1], "r"))
    same = [k for k in b if k.startswith(("params/", "optim/"))]
    assert len(same) > 10, f"only {len(same)} tensors"
    for k in same:
        assert a[k].tobytes() == b[k].tobytes(), f"{k} changed across a skipped step"
    print(f"unchanged across the skipped step: {len(same)} parameter and optimizer tensors")
