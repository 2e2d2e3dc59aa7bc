"""st_ref.py: a minimal safetensors reader and writer written from the format's
specification (huggingface/safetensors README), independent of fmhpc's C code
and of the `safetensors` package (not installed here): 8-byte little-endian
header length, a JSON header {name: {dtype, shape, data_offsets}} with an
optional "__metadata__" string map, then the data region, which the tensors
must cover exactly. bfloat16 goes through torch (numpy has no bfloat16)."""
import json
import struct

import numpy as np
import torch

NP = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
      "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
SIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
# The spec's dtype order (increasing alignment); writers sort widest first.
ORDER = ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "F64",
         "I64", "U64"]


def read(path):
    """Returns (header_len, metadata, {name: (dtype, shape, begin, end, array)}), checking the spec's rules."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n <= len(raw) - 8, "header length past the end"
    text = raw[8:8 + n].decode("utf-8")
    assert text.startswith("{"), "header must start with {"
    pairs = json.loads(text, object_pairs_hook=lambda kv: kv)
    names = [k for k, _ in pairs]
    assert len(names) == len(set(names)), "duplicate names"
    head = dict(pairs)
    meta = dict(head.pop("__metadata__", []))
    data = raw[8 + n:]
    out, spans = {}, []
    for name, info in head.items():
        info = dict(info)
        dt, shape, (b, e) = info["dtype"], info["shape"], info["data_offsets"]
        count = int(np.prod(shape)) if shape else 1
        assert e - b == count * SIZE[dt], f"{name}: size"
        buf = data[b:e]
        if dt == "BF16":
            bits = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32).reshape(shape)
        else:
            arr = np.frombuffer(buf, dtype=np.dtype(NP[dt]).newbyteorder("<")).reshape(shape)
        out[name] = (dt, list(shape), b, e, arr)
        spans.append((b, e))
    spans.sort()
    pos = 0
    for b, e in spans:
        assert b == pos, "hole or overlap in the data region"
        pos = e
    assert pos == len(data), "data region not fully covered"
    return n, meta, out


def to_bytes(arr, dt):
    if dt == "BF16":
        t = torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32)).to(torch.bfloat16)
        return t.view(torch.int16).numpy().astype("<i2").tobytes()
    return np.ascontiguousarray(arr, dtype=np.dtype(NP[dt]).newbyteorder("<")).tobytes()


def as_stored(arr, dt):
    """What a float32 array becomes once stored as dt, back in float32."""
    t = torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32))
    tdt = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}[dt]
    return t.to(tdt).to(torch.float32).numpy()


def write(path, tensors, metadata=None, pad=True):
    """tensors: {name: (dtype, float array)}. Header order and padding as the reference writer."""
    names = sorted(tensors, key=lambda k: (-ORDER.index(tensors[k][0]), k))
    head, blobs, pos = {}, [], 0
    if metadata is not None:
        head["__metadata__"] = metadata
    for k in names:
        dt, arr = tensors[k]
        b = to_bytes(arr, dt)
        head[k] = {"dtype": dt, "shape": list(np.shape(arr)), "data_offsets": [pos, pos + len(b)]}
        blobs.append(b)
        pos += len(b)
    text = json.dumps(head, separators=(",", ":")).encode()
    if pad:
        text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
