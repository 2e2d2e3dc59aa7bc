#!/usr/bin/python3
"""check_tb.py RUN_DIR RUN_NAME NFILES: read the NFILES TensorBoard event files in RUN_DIR
with protobuf's own parser (Debian's python3-protobuf), from message classes
built here from TensorFlow's published field numbers (event.proto,
summary.proto, tensor.proto), not from fmhpc's encoder, and compare every
scalar with RUN_DIR/metrics.jsonl:
  - TFRecord framing: each length and data CRC-32C (masked) checked with a
    CRC written here and itself checked on the standard check value;
  - every record parses, and re-serializes to the same bytes (no unknown
    field, no wrong wire type);
  - each file's first event is file_version "brain.Event:2", then its own
    text events run/name (== RUN_NAME) and run/deck (holds the name);
  - each (tag, step) scalar equals its metrics.jsonl value: losses exactly
    as float32 of loss_hex / val_loss_hex, the rest within one float32 ulp
    (metrics.jsonl keeps 10 significant digits); and every step/eval value of
    metrics.jsonl has its scalar: nothing missing, nothing extra.
Exit 0 only if all holds and at least one step and one validation were
compared; 77 (skip) without python3-protobuf unless CI=true (then 1)."""
import glob
import json
import math
import os
import struct
import sys
import time

try:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
except ImportError:
    print("check_tb: python3-protobuf is missing (apt-get install python3-protobuf)")
    sys.exit(1 if os.environ.get("CI") == "true" else 77)
import numpy as np

F = descriptor_pb2.FieldDescriptorProto


def build_classes():
    fd = descriptor_pb2.FileDescriptorProto(name="fmhpc_tb_check.proto", package="tbcheck", syntax="proto3")

    def msg(name, fields, parent=None):
        m = (parent.nested_type if parent else fd.message_type).add(name=name)
        for fname, num, ftype, label, tname, oneof in fields:
            f = m.field.add(name=fname, number=num, type=ftype, label=label)
            if tname:
                f.type_name = tname
            if oneof is not None:
                f.oneof_index = oneof
        return m

    OPT, REP = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    # tensorflow/core/framework/tensor_shape.proto, tensor.proto (the fields used)
    msg("TensorShapeProto", [])
    msg("TensorProto", [("dtype", 1, F.TYPE_INT32, OPT, None, None),
                        ("tensor_shape", 2, F.TYPE_MESSAGE, OPT, ".tbcheck.TensorShapeProto", None),
                        ("string_val", 8, F.TYPE_BYTES, REP, None, None)])
    # summary.proto
    md = msg("SummaryMetadata", [("plugin_data", 1, F.TYPE_MESSAGE, OPT, ".tbcheck.SummaryMetadata.PluginData", None)])
    msg("PluginData", [("plugin_name", 1, F.TYPE_STRING, OPT, None, None),
                       ("content", 2, F.TYPE_BYTES, OPT, None, None)], md)
    summ = msg("Summary", [("value", 1, F.TYPE_MESSAGE, REP, ".tbcheck.Summary.Value", None)])
    val = msg("Value", [("tag", 1, F.TYPE_STRING, OPT, None, None),
                        ("simple_value", 2, F.TYPE_FLOAT, OPT, None, 0),
                        ("tensor", 8, F.TYPE_MESSAGE, OPT, ".tbcheck.TensorProto", 0),
                        ("metadata", 9, F.TYPE_MESSAGE, OPT, ".tbcheck.SummaryMetadata", None)], summ)
    val.oneof_decl.add(name="value")
    # event.proto
    ev = msg("Event", [("wall_time", 1, F.TYPE_DOUBLE, OPT, None, None),
                       ("step", 2, F.TYPE_INT64, OPT, None, None),
                       ("file_version", 3, F.TYPE_STRING, OPT, None, 0),
                       ("summary", 5, F.TYPE_MESSAGE, OPT, ".tbcheck.Summary", 0)])
    ev.oneof_decl.add(name="what")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    desc = pool.FindMessageTypeByName("tbcheck.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    blob = open(path, "rb").read()
    off = 0
    while off < len(blob):
        if off + 12 > len(blob):
            sys.exit(f"FAIL: {path}: truncated record header at byte {off}")
        head = blob[off:off + 8]
        (n,) = struct.unpack("<Q", head)
        (hcrc,) = struct.unpack("<I", blob[off + 8:off + 12])
        if hcrc != masked(head):
            sys.exit(f"FAIL: {path}: length CRC wrong at byte {off}")
        data = blob[off + 12:off + 12 + n]
        if len(data) != n or off + 16 + n > len(blob):
            sys.exit(f"FAIL: {path}: truncated record at byte {off}")
        (dcrc,) = struct.unpack("<I", blob[off + 12 + n:off + 16 + n])
        if dcrc != masked(data):
            sys.exit(f"FAIL: {path}: data CRC wrong at byte {off}")
        yield data
        off += 16 + n


STEP_KEYS = {"train/loss": "loss", "train/lr": "lr", "train/grad_norm": "grad_norm",
             "train/tokens_per_s": "tokens_per_s", "train/mfu": "mfu", "time/step_s": "step_s",
             "time/data_s": "data_s", "time/compute_s": "compute_s", "time/update_s": "update_s"}
EVAL_KEYS = {"val/loss": "val_loss", "val/perplexity": "val_ppl"}


def main():
    run_dir, name, nfiles = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if crc32c(b"123456789") != 0xE3069283:
        sys.exit("FAIL: the test's own CRC-32C is wrong")
    Event = build_classes()
    files = sorted(glob.glob(os.path.join(run_dir, "events.out.tfevents.*")))
    if len(files) != nfiles:
        sys.exit(f"FAIL: expected {nfiles} event files in {run_dir}, found {files}")
    scalars, nrec = {}, 0
    for path in files:
        nrec += read_file(Event, path, name, scalars)
    compare(run_dir, name, scalars, nrec, len(files))


def read_file(Event, path, name, scalars):
    texts, last_wall, nrec = {}, 0.0, 0
    for i, data in enumerate(records(path)):
        ev = Event()
        ev.ParseFromString(data)
        if ev.SerializeToString(deterministic=True) != data:
            sys.exit(f"FAIL: record {i} does not re-serialize to its bytes (unknown field or wrong wire type)")
        if not (time.time() - 3600 < ev.wall_time < time.time() + 60) or ev.wall_time < last_wall:
            sys.exit(f"FAIL: record {i}: wall_time {ev.wall_time} not a recent, non-decreasing time")
        last_wall = ev.wall_time
        nrec += 1
        if i == 0:
            if ev.WhichOneof("what") != "file_version" or ev.file_version != "brain.Event:2":
                sys.exit(f"FAIL: first event is not file_version brain.Event:2: {ev}")
            continue
        if ev.WhichOneof("what") != "summary":
            sys.exit(f"FAIL: record {i} holds no summary")
        for v in ev.summary.value:
            kind = v.WhichOneof("value")
            if kind == "tensor":
                if v.metadata.plugin_data.plugin_name != "text" or v.tensor.dtype != 7:
                    sys.exit(f"FAIL: text value {v.tag} lacks the text plugin or DT_STRING")
                texts[v.tag] = v.tensor.string_val[0].decode()
            elif kind == "simple_value":
                key = (v.tag, ev.step)
                if key in scalars:
                    sys.exit(f"FAIL: {key} written twice")
                scalars[key] = v.simple_value
            else:
                sys.exit(f"FAIL: value {v.tag} has neither simple_value nor tensor")
    if texts.get("run/name") != name:
        sys.exit(f"FAIL: {path}: run/name text is {texts.get('run/name')!r}, want {name!r}")
    if f"'{name}'" not in texts.get("run/deck", ""):
        sys.exit(f"FAIL: {path}: run/deck text does not hold the run name")
    return nrec


def compare(run_dir, name, scalars, nrec, nfiles):

    def f32(x):
        return float(np.float32(x))

    def close(tb, ref, key):
        if ref is None:  # metrics.jsonl writes a non-finite value as null
            return not math.isfinite(tb)
        if isinstance(ref, str):  # a hex float: the exact double
            want = f32(float.fromhex(ref))
            return tb == want or (math.isnan(tb) and math.isnan(want))
        want = np.float32(ref)
        ulp = float(np.spacing(np.abs(want)))
        return abs(tb - float(want)) <= ulp or (math.isnan(tb) and math.isnan(float(want)))

    expected, nstep, neval = 0, 0, 0
    for line in open(os.path.join(run_dir, "metrics.jsonl")):
        r = json.loads(line)
        keys = STEP_KEYS if r["record"] == "step" else EVAL_KEYS if r["record"] == "eval" else None
        if keys is None:
            continue
        nstep += r["record"] == "step"
        neval += r["record"] == "eval"
        for tag, k in keys.items():
            expected += 1
            got = scalars.get((tag, r["step"]))
            if got is None:
                sys.exit(f"FAIL: no TensorBoard scalar {tag} at step {r['step']}")
            ref = r["loss_hex"] if k == "loss" else r["val_loss_hex"] if k == "val_loss" else r[k]
            if k == "val_ppl":
                ref = math.exp(min(float.fromhex(r["val_loss_hex"]), 700.0))
                if not close(got, r[k], k):
                    sys.exit(f"FAIL: val/perplexity at step {r['step']}: {got} vs metrics.jsonl {r[k]}")
            if not close(got, ref, k):
                sys.exit(f"FAIL: {tag} at step {r['step']}: TensorBoard {got!r}, metrics.jsonl {ref!r}")
    if len(scalars) != expected:
        sys.exit(f"FAIL: {len(scalars)} TensorBoard scalars, metrics.jsonl accounts for {expected}")
    if nstep == 0 or neval == 0:
        sys.exit(f"FAIL: compared {nstep} steps and {neval} validations: need both")
    print(f"tensorboard: {nfiles} files, {nrec} records, CRCs valid, {expected} scalars ({nstep} steps x {len(STEP_KEYS)} tags, "
          f"{neval} validations x {len(EVAL_KEYS)} tags) equal to metrics.jsonl; run/name {name!r}")


main()
