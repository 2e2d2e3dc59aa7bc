#!/bin/bash
# plot_fixture.sh FMHPC WORKDIR: `fmhpc --plot` on a metrics.jsonl written
# here as a running job leaves it: a deck record naming the run, 300 steps of
# a falling loss under warmup + cosine lr, a validation every 50 steps, a
# resume at step 120 after steps up to 130 were written (121..130 come
# twice), a step whose loss is null (not finite), and a last record still
# without its newline. The PNG must decode
# at its stated size with every series drawn (check_png.py). Errors: a run
# directory without metrics.jsonl, and a corrupt line, fail with the file
# and line named.
set -euo pipefail
FMHPC=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$WORK" && mkdir -p "$WORK/run" "$WORK/bad" "$WORK/empty"
/usr/bin/python3 - "$WORK/run/metrics.jsonl" <<'PYEOF'
import json, math, random, sys
rnd = random.Random(7)
out = open(sys.argv[1], "w")
deck = "&run\n  task = 'train'\n  name = 'fixture: 300 steps'\n/\n"
print(json.dumps({"record": "deck", "fmhpc": "0.1.0", "git": "fixture", "deck": deck}), file=out)
def lr(t): return 1e-3 * (t / 20 if t <= 20 else 0.1 + 0.45 * (1 + math.cos(math.pi * (t - 20) / 280)))
def step(t): return {"record": "step", "step": t, "loss": 10.8 * math.exp(-t / 60) + 4.2 + 0.15 * rnd.random(), "lr": lr(t)}
def ev(t): return {"record": "eval", "step": t, "val_loss": 10.8 * math.exp(-t / 60) + 4.5}
for t in range(1, 131):
    print(json.dumps(step(t)), file=out)
    if t % 50 == 0: print(json.dumps(ev(t)), file=out)
print(json.dumps({"record": "resume", "step": 120, "checkpoint": "ckpt/step_00000120.h5"}), file=out)
for t in range(121, 301):
    s = step(t)
    if t == 200:  # a skipped step with a non-finite gradient: null in metrics.jsonl
        s.update(loss=None, grad_norm=None)
    print(json.dumps(s), file=out)
    if t % 50 == 0: print(json.dumps(ev(t)), file=out)
out.write('{"record": "step", "step": 301, "loss": 4.')  # being written
PYEOF
"$FMHPC" --plot "$WORK/run" > "$WORK/plot.log" 2>&1 || { cat "$WORK/plot.log"; echo "FAIL: fmhpc --plot"; exit 1; }
grep -q "wrote $WORK/run/loss.png" "$WORK/plot.log" || { cat "$WORK/plot.log"; echo "FAIL: --plot did not name its output"; exit 1; }
/usr/bin/python3 "$HERE/check_png.py" "$WORK/run/loss.png" 1000 600

if "$FMHPC" --plot "$WORK/empty" > "$WORK/empty.log" 2>&1; then echo "FAIL: --plot on a directory without metrics.jsonl succeeded"; exit 1; fi
grep -q "cannot read '$WORK/empty/metrics.jsonl'" "$WORK/empty.log" || { cat "$WORK/empty.log"; echo "FAIL: error does not name the file"; exit 1; }
head -n 3 "$WORK/run/metrics.jsonl" > "$WORK/bad/metrics.jsonl"
echo '{"record": "step", "step": 3, "loss": }' >> "$WORK/bad/metrics.jsonl"
if "$FMHPC" --plot "$WORK/bad" > "$WORK/bad.log" 2>&1; then echo "FAIL: --plot on a corrupt line succeeded"; exit 1; fi
grep -q "$WORK/bad/metrics.jsonl:4:" "$WORK/bad.log" || { cat "$WORK/bad.log"; echo "FAIL: error does not name file:line"; exit 1; }
[ ! -e "$WORK/bad/loss.png" ] || { echo "FAIL: a corrupt file still produced a plot"; exit 1; }
echo "errors: a missing metrics.jsonl and a corrupt line 4 named"
