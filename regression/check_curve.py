#!/usr/bin/python3
"""check_curve.py METRICS REFERENCE [--write]: the nano GPT-2 run against its
regression reference.
Independent checks: the first step's loss is ln(V) within 0.1 (a freshly
initialised model predicts nearly uniformly: ln 50257 = 10.825), and the final
validation loss is below the reference's stated threshold.
Change guard (fmhpc's own earlier output, so it only catches change, not
error): every validation loss within `rel_tol` of the stored curve. The run is
bitwise reproducible on one stack; the tolerance allows other CPUs/BLAS
kernels. --write stores the run as the new reference (keeps the threshold)."""
import json, math, sys

metrics, ref_path = sys.argv[1], sys.argv[2]
recs = [json.loads(l) for l in open(metrics)]
steps = [r for r in recs if r["record"] == "step"]
evals = {str(r["step"]): r["val_loss"] for r in recs if r["record"] == "eval"}
if not steps or not evals:
    sys.exit(f"FAIL: {metrics}: {len(steps)} step and {len(evals)} eval records: nothing to check")
first = steps[0]["loss"]
fails = []
if abs(first - math.log(50257)) > 0.1:
    fails.append(f"first loss {first:.4f}, expected ln(50257) = {math.log(50257):.4f} +- 0.1")
if "--write" in sys.argv:
    ref = json.load(open(ref_path))
    ref["val_loss"] = evals
    json.dump(ref, open(ref_path, "w"), indent=1, sort_keys=True)
    print("wrote", ref_path)
ref = json.load(open(ref_path))
final = evals[max(evals, key=int)]
if not final < ref["threshold"]:
    fails.append(f"final validation loss {final:.4f} is not below the threshold {ref['threshold']}")
if not ref["val_loss"]:
    fails.append(f"{ref_path} stores no validation losses: the change guard would compare nothing")
for step, want in ref["val_loss"].items():
    got = evals.get(step)
    if got is None or abs(got - want) > ref["rel_tol"] * want:
        fails.append(f"step {step}: val_loss {got} vs reference {want:.4f} (rel tol {ref['rel_tol']})")
print("val_loss:", " ".join(f"{s}:{evals[s]:.4f}" for s in sorted(evals, key=int)))
print(f"first loss {first:.4f}; final val loss {final:.4f} (threshold {ref['threshold']})")
for f in fails:
    print("FAIL:", f)
print("PASS: curve" if not fails else "curve check failed")
sys.exit(1 if fails else 0)
