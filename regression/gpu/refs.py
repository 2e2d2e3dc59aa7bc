"""refs.py: fmhpc's outputs read by the real thing, on the GPU machine (the
only machine here with transformers and TensorBoard; check.sh --prebuilt runs
it there). CI checks the same outputs with references written in this
repository (tests/interop/check_hf.py, tests/metrics/check_tb.py); this is
the cross-check that those references state the formats right.

  refs.py hf FIXTURES   each FIXTURES/<case> of regression/gpu/hf_fixtures.sh:
                        transformers' AutoModelForCausalLM loads hf/ (every
                        weight present, none left to initialise), runs ids.bin
                        in float64, and its logits must equal fmhpc's fp32
                        logits.bin within 1e-4 of the logits' scale, with the
                        same argmax at every position
  refs.py tb RUN_DIR    TensorBoard's EventAccumulator loads the event files of
                        a training run (tests/metrics/nano_run.sh's run/); every
                        step and validation scalar of metrics.jsonl must be
                        there, as float32 of its value (losses of their hex
                        doubles), and the run/name text must be in the files
Prints one line per case, "PASS ..." or "FAIL ..."; exit 1 on any FAIL."""
import json
import math
import os
import sys

import numpy as np


def hf(root):
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    bad = 0
    cases = sorted(c for c in os.listdir(root) if os.path.isdir(os.path.join(root, c)))
    if not cases:
        print(f"FAIL hf: no cases in {root}")
        return 1
    for case in cases:
        d = os.path.join(root, case)
        ids = np.fromfile(os.path.join(d, "ids.bin"), dtype=np.int32)
        ref = np.fromfile(os.path.join(d, "logits.bin"), dtype=np.float32).reshape(len(ids), -1)
        try:
            try:
                model, info = AutoModelForCausalLM.from_pretrained(os.path.join(d, "hf"), dtype=torch.float64,
                                                                   attn_implementation="eager",
                                                                   output_loading_info=True)
            except TypeError:  # transformers < 4.56 names it torch_dtype
                model, info = AutoModelForCausalLM.from_pretrained(os.path.join(d, "hf"), torch_dtype=torch.float64,
                                                                   attn_implementation="eager",
                                                                   output_loading_info=True)
        except Exception as e:  # noqa: BLE001 - any load failure is the finding
            print(f"FAIL hf {case}: transformers {transformers.__version__} could not load it: {e}")
            bad += 1
            continue
        missing = [k for k in info.get("missing_keys", []) if "rotary_emb" not in k]
        if missing or info.get("unexpected_keys") or info.get("mismatched_keys"):
            print(f"FAIL hf {case}: loading info {info}")
            bad += 1
            continue
        model.eval()
        with torch.no_grad():
            out = model(torch.tensor(ids.astype(np.int64))[None]).logits[0].double().numpy()
        if out.shape != ref.shape:
            print(f"FAIL hf {case}: logits shape {out.shape}, fmhpc {ref.shape}")
            bad += 1
            continue
        diff = float(np.abs(out - ref).max())
        scale = max(1.0, float(np.abs(out).max()))
        same_argmax = bool((out.argmax(1) == ref.argmax(1)).all())
        ok = diff <= 1e-4 * scale and same_argmax
        bad += not ok
        cfg = model.config
        rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_theta", None)
        print(f"{'PASS' if ok else 'FAIL'} hf {case}: {type(model).__name__} (transformers {transformers.__version__}), "
              f"{len(ids)} positions x {ref.shape[1]} logits, max |diff| {diff:.3g} (scale {scale:.3g}), "
              f"argmax {'equal' if same_argmax else 'DIFFERS'}" + (f", rope {rope}" if "llama" in case else ""))
    return 1 if bad else 0


def tb(run_dir):
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(run_dir, size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    acc.Reload()
    tags = acc.Tags()
    scalars = {}
    for tag in tags.get("scalars", []):
        for e in acc.Scalars(tag):
            scalars[(tag, e.step)] = e.value
    step_keys = {"train/loss": "loss_hex", "train/lr": "lr", "train/grad_norm": "grad_norm",
                 "train/tokens_per_s": "tokens_per_s", "train/mfu": "mfu", "time/step_s": "step_s",
                 "time/data_s": "data_s", "time/compute_s": "compute_s", "time/update_s": "update_s"}
    eval_keys = {"val/loss": "val_loss_hex", "val/perplexity": "val_ppl"}
    want, compared, name = 0, 0, None
    for line in open(os.path.join(run_dir, "metrics.jsonl")):
        r = json.loads(line)
        if r["record"] == "deck":
            continue
        keys = step_keys if r["record"] == "step" else eval_keys if r["record"] == "eval" else {}
        for tag, k in keys.items():
            want += 1
            got = scalars.get((tag, r["step"]))
            ref = r.get(k)
            if got is None:
                print(f"FAIL tb: TensorBoard has no {tag} at step {r['step']}")
                return 1
            if ref is None:
                ok = not math.isfinite(got)
            else:
                exp = float(np.float32(float.fromhex(ref) if k.endswith("_hex") else ref))
                tol = 0.0 if k.endswith("_hex") else float(np.spacing(np.float32(abs(exp))))
                ok = abs(got - exp) <= tol
            if not ok:
                print(f"FAIL tb: {tag} at step {r['step']}: TensorBoard {got!r}, metrics.jsonl {ref!r}")
                return 1
            compared += 1
    for tag in tags.get("tensors", []):
        if tag == "run/name":
            t = acc.Tensors(tag)[-1].tensor_proto
            name = t.string_val[0].decode() if t.string_val else None
    extra = len(scalars) - want
    ok = compared > 0 and extra == 0 and name is not None
    print(f"{'PASS' if ok else 'FAIL'} tb: TensorBoard's EventAccumulator read {len(scalars)} scalars "
          f"({len(tags.get('scalars', []))} tags) from {run_dir}; {compared} equal to metrics.jsonl, "
          f"{extra} extra; run/name {name!r}")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("hf", "tb"):
        sys.exit(__doc__)
    sys.exit(hf(sys.argv[2]) if sys.argv[1] == "hf" else tb(sys.argv[2]))
