#!/usr/bin/env python3
"""produce.py FMHPC: each case runs fmhpc (one process, no launcher) on a bad
command line or deck and asserts the exit status and the message(s) it must
print, as a user reads them. Cases are the catalogue's (docs/errors.md):
their expected texts are what ties an entry to the test that produces it.
Every case must fail as stated, or this test fails; it names the case."""
import os
import subprocess
import sys
import tempfile

FMHPC = os.path.abspath(sys.argv[1])
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
L = os.path.join(ROOT, "inputs", "llama_nano.in")
G = os.path.join(ROOT, "inputs", "gpt2_nano.in")
tmp = tempfile.mkdtemp(prefix="fmhpc_produce_")


def deck(name, text):
    p = os.path.join(tmp, name)
    with open(p, "w") as f:
        f.write(text)
    return p


# (name, argv, exit status, [texts that must appear in stdout+stderr])
CASES = [
    ("encode_no_path", ["--encode"], 2, ["fmhpc: --encode needs a tokenizer path"]),
    ("verify_no_path", ["--verify"], 2, ["fmhpc: --verify needs a store (a prep manifest .json or an .h5 shard)"]),
    ("plot_no_dir", ["--plot"], 2, ["fmhpc: --plot needs a run directory (&run out_dir)"]),
    ("ranks_not_a_count", ["--ranks", "x"], 2, ["fmhpc: --ranks needs a positive rank count"]),
    ("ranks_without_check", ["--ranks", "4", L], 2, ["fmhpc: --ranks only makes sense with --check"]),
    ("unknown_option", ["--bogus"], 2, ["fmhpc: unknown option '--bogus'", "hint: fmhpc --help lists the options"]),
    ("deck_missing", [os.path.join(tmp, "nonexist.in")], 2,
     ["cannot read deck '" + os.path.join(tmp, "nonexist.in") + "': No such file or directory",
      "hint: check the path; decks ship in inputs/"]),
    ("verify_not_a_store", ["--verify", L], 1, [L + ": a store is a prep manifest (.json) or an HDF5 shard (.h5)"]),
    ("gpt2_gqa", ["--check", G, "model%n_kv_head=2"], 2,
     ["&model n_kv_head = 2: GPT-2 has no grouped-query attention: use 0 or n_head"]),
    ("heads_divide_d_model", ["--check", G, "model%n_head=5"], 2,
     ["&model n_head = 5: must divide d_model = 128 (or set head_dim)",
      "&model head_dim = 0: GPT-2 needs n_head * head_dim = d_model = 128"]),
    ("rope_odd_head", ["--check", L, "model%head_dim=7", "model%d_model=28"], 2,
     ["&model head_dim = 7: RoPE rotates pairs: head size 7 must be even"]),
    ("kv_heads", ["--check", L, "model%n_kv_head=8"], 2,
     ["&model n_kv_head = 8: must divide n_head = 4 (each KV head serves n_head/n_kv_head query heads)",
      "&model n_kv_head = 8: must be <= n_head = 4"]),
    ("tensor_limit", ["--check", L, "model%vocab_size=2000000000000000"], 2,
     ["&model vocab_size = 2000000000000000: must be <= 2^50 = 1125899906842624, the most elements fmhpc sizes in one tensor"]),
    ("inv_sqrt_warmup", ["--check", L, "optim%schedule='inv_sqrt'", "optim%warmup_steps=0"], 2,
     ["&optim warmup_steps = 0: schedule 'inv_sqrt' needs warmup_steps >= 1: its lr is lr*sqrt(warmup_steps/step)",
      "hint: warmup_steps = 1 gives lr/sqrt(step) from step 1"]),
    ("warmup_past_steps", ["--check", L, "optim%warmup_steps=100000000"], 2,
     ["&optim warmup_steps = 100000000: must be <= &train steps = 300 (warmup would never end)"]),
    ("warmup_past_steps_train", [L, "optim%warmup_steps=100000000", "data%train='" + tmp + "/none.json'",
                                 "run%out_dir='" + tmp + "/run'"], 2,
     ["&optim warmup_steps = 100000000: must be <= &train steps = 300 (warmup would never end)"]),
    ("dp_share", ["--check", "--ranks", "3", L], 2,
     ["&train global_batch = 16: gives 4 micro-batches of 4, which 3 data-parallel ranks cannot share equally "
      "(use a rank count whose dp divides 4)"]),
    ("tp_ranks", ["--check", L, "parallel%tp=3"], 2, ["&parallel tp = 3: must divide the number of ranks (1)"]),
    ("train_no_store", [L, "data%train=''", "run%out_dir='" + tmp + "/run'"], 2,
     ["&data train = '': training needs a store (prep's train.json or a .h5 shard)"]),
    ("unterminated_string", ["--check", deck("d1.in", "&run name = 'abc\n/\n")], 2,
     [":1:13: &run name: unterminated string: no closing ' on this line (strings end on the line they start)"]),
    ("repeat_too_large", ["--check", deck("d2.in", "&prep inputs = 99999999*'a' /\n")], 2,
     [":1:16: &prep inputs: repeat count 99999999 is too large (at most 65536 values)"]),
    ("null_value", ["--check", deck("d3.in", "&prep inputs = 2* /\n")], 2,
     [":1:16: &prep inputs: expected a value right after '2*' (null values are not supported; write e.g. 4*0.0)"]),
    ("too_many_values", ["--check", deck("d4.in", "&prep inputs = " + ", ".join(["'a'"] * 100) + " /\n")], 2,
     ["&prep inputs: too many values: inputs holds at most 64, got 100 from element 1"]),
]


def main():
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    bad = 0
    for name, argv, status, texts in CASES:
        try:
            r = subprocess.run([FMHPC] + argv, capture_output=True, text=True, timeout=120, env=env, cwd=tmp)
        except subprocess.TimeoutExpired:
            print(f"FAIL {name}: still running after 120 s")
            bad += 1
            continue
        out = r.stdout + r.stderr
        missing = [t for t in texts if t not in out]
        if r.returncode != status or missing:
            bad += 1
            print(f"FAIL {name}: exit {r.returncode} (expected {status}); missing: {missing}")
            print("  output tail: " + "\n  ".join(out.strip().splitlines()[-6:]))
        else:
            print(f"ok   {name}: exit {status}, {len(texts)} message(s)")
    print(f"{len(CASES) - bad} of {len(CASES)} cases produce their messages")
    return 1 if bad or not CASES else 0


if __name__ == "__main__":
    sys.exit(main())
