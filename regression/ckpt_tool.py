#!/usr/bin/env python3
"""ckpt_tool.py FILE: list an fmhpc checkpoint's tensors with h5py and verify
every dataset's sha256 attribute independently of the C code (the scheme
"sha256-blocks-v1" of include/fmhpc/ckpt.h: pieces cut at multiples of 65536
elements of the flat vector, SHA-256 of the pieces' digests). Prints one line
per dataset; exit 1 if any checksum differs or expected names are missing."""
import hashlib
import sys

import h5py
import numpy as np

BLOCK = 1 << 16


def checksum(data, off):
    flat = np.ascontiguousarray(data).reshape(-1)
    le = flat.astype(flat.dtype.newbyteorder("<"), copy=False)
    outer, i, n = hashlib.sha256(), 0, flat.size
    while i < n:
        end = min(n, ((off + i) // BLOCK + 1) * BLOCK - off)
        outer.update(hashlib.sha256(le[i:end].tobytes()).digest())
        i = end
    return outer.hexdigest()


def main(path):
    bad, names = 0, []
    with h5py.File(path, "r") as f:
        print(f"{path}: step {f.attrs['step']}, written at {f.attrs['world_size']} ranks, "
              f"fmhpc {f.attrs['fmhpc_version']} (git {f.attrs['git']}), HDF5 {f.attrs['hdf5_version']}")

        def visit(name, obj):
            nonlocal bad
            if not isinstance(obj, h5py.Dataset):
                return
            names.append(name)
            off = int(obj.attrs.get("flat_offset", 0))
            ok = checksum(obj[...], off) == obj.attrs["sha256"].decode()
            bad += not ok
            print(f"  {name:40s} {str(obj.dtype):8s} {obj.shape} {'ok' if ok else 'CHECKSUM MISMATCH'}")
        f.visititems(visit)
    need = ["params/", "optim/m/", "optim/v/", "reduce/amax_prev"]
    missing = [n for n in need if not any(x.startswith(n) for x in names)]
    if missing:
        print(f"missing: {missing}")
    print(f"{len(names)} datasets, {bad} checksum mismatches")
    return 1 if bad or missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
