#!/usr/bin/env python3
"""produce.py FMHPC [GROUP...]: each case runs fmhpc (one process, no launcher) on a bad
command line or deck and asserts the exit status and the message(s) it must
print, as a user reads them. Cases are the catalogue's (docs/errors.md):
their expected texts are what ties an entry to the test that produces it.
Every case must fail as stated, or this test fails; it names the case.
The cases come in groups (one ctest each, errors.produce_GROUP, so that they
run in parallel); with no GROUP, all of them."""
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
CLI = [
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




def task(name, group, text):
    """A deck of one task: &run task = TASK and the text (its groups)."""
    return deck(name, f"&run task = '{group}' out_dir = '{tmp}/out_{name}' /\n" + text)


# The deck and command line: the namelist reader and the key binder (src/deck)
DECK = [
    ("did_you_mean_key", ["--check", L, "model%d_modle=3"], 2,
     ["<command line>:1:7: &model d_modle: unknown key; expected a key of &model", "hint: did you mean 'd_model'?"]),
    ("did_you_mean_group", ["--check", deck("g.in", "&modle d_model=3 /\n")], 2,
     ["g.in:1:1: &modle: unknown group; expected one of &run, &model", "hint: did you mean '&model'?"]),
    ("quote_it", ["--check", L, "run%name=abc"], 2,
     ["<command line>:1:10: &run name = abc: expected a quoted string, got an unquoted word", "hint: quote it: 'abc'"]),
    ("nul_byte", ["--check", deck("nul.in", "&run name='a' /\n\0&model /\n")], 2,
     ["nul.in:2:1: a NUL byte (\\0): a deck is text, and everything after it would be ignored",
      "hint: remove it; a deck saved by a word processor or a damaged copy can hold one"]),
    ("glob_matches_nothing", [deck("glob.in", "&run task='prep' /\n&prep inputs='nothing*.jsonl' tokenizer='x' output='o' /\n")], 2,
     ["glob.in:2:7: &prep inputs = 'nothing*.jsonl': 'nothing*.jsonl' matches no file",
      "hint: relative globs start in the directory fmhpc runs in"]),
    ("values_past_reader_limit", ["--check", deck("many.in", "&optim betas=" + ",".join(["0.9"] * 70000) + " /\n")], 2,
     ["many.in:1:262158: &optim betas: too many values (at most 65536)"]),
    ("out_of_range", ["--check", L, "model%d_model=-1"], 2, ["<command line>:1:15: &model d_model = -1: out of range: must be >= 1"]),
    ("wrong_type", ["--check", L, "model%d_model='x'"], 2,
     ["<command line>:1:15: &model d_model = 'x': expected an integer, got a string"]),
    ("key_of_other_group", ["--check", L, "run%backend='cuda'"], 2,
     ["<command line>:1:5: &run backend: unknown key; expected a key of &run", "hint: 'backend' is a key of &train, not of &run"]),
    ("tp_kv_heads", ["--check", "--ranks", "4", L, "parallel%tp=4"], 2,
     ["&parallel tp = 4: must divide the model's 2 key/value heads (each tp rank owns whole KV heads): valid tp values are 1, 2"]),
]

# The tasks' own rules on their decks (prep, tokenizer, dedup, eval, generate, ifd)
TASKS = [
    ("dedup_no_inputs", [task("dd1.in", "dedup", "&dedup output='o.jsonl' /\n")], 2,
     ["&dedup inputs = : task = 'dedup' needs input globs", "hint: inputs = 'data/sft/*.jsonl'"]),
    ("dedup_no_fields", [task("dd2.in", "dedup", f"&dedup inputs='{L}' fields='' output='o.jsonl' /\n")], 2,
     ["&dedup fields = '': needs at least one JSON field to compare", "hint: fields = 'prompt', 'response'"]),
    ("dedup_bands_rows", [task("dd3.in", "dedup", f"&dedup inputs='{L}' fields='a' output='o.jsonl' bands=3 rows=3 /\n")], 2,
     ["&dedup bands = 3: bands * rows = 3 * 3 must equal num_perm = 128",
      "hint: for num_perm = 128 and threshold 0.7: bands = 32, rows = 4"]),
    ("dedup_no_output", [task("dd4.in", "dedup", f"&dedup inputs='{L}' fields='a' output='' /\n")], 2,
     ["&dedup output = '': needs an output file"]),
    ("tokenizer_no_inputs", [task("tk1.in", "tokenizer", "&tokenizer output='o.json' /\n")], 2,
     ["&tokenizer inputs = : task = 'tokenizer' needs input globs"]),
    ("prep_no_tokenizer", [task("pp1.in", "prep", f"&prep inputs='{L}' output='o' /\n")], 2,
     ["&prep tokenizer = '': task = 'prep' needs a tokenizer",
      "hint: tokenizer = 'tokenizers/gpt2' (a directory with encoder.json and vocab.bpe)"]),
    ("prep_no_inputs", [task("pp2.in", "prep", "&prep tokenizer='x' output='o' /\n")], 2,
     ["&prep inputs = : task = 'prep' needs input globs", "hint: inputs = 'corpus/*.jsonl.zst'"]),
    ("prep_two_valid_splits", [task("pp3.in", "prep", f"&prep inputs='{L}' tokenizer='x' output='o' valid_fraction=0.1 valid_inputs='{L}' /\n")], 2,
     ["&prep valid_fraction = 0.1: valid_fraction = 0.1 and valid_inputs both choose the validation split",
      "hint: keep one of them"]),
    ("prep_sft_no_train_on", [task("pp4.in", "prep", f"&prep inputs='{L}' tokenizer='x' output='o' mode='sft' /\n")], 2,
     ["&prep train_on = : mode = 'sft' needs train_on: the sections or roles to train",
      "hint: train_on = 'assistant' (roles) or 'response' (sections)"]),
    ("prep_deck_template_empty", [task("pp5.in", "prep", f"&prep inputs='{L}' tokenizer='x' output='o' mode='sft' train_on='assistant' chat_template='deck' /\n")], 2,
     ["&prep role_names = : chat_template = 'deck' needs role_names, role_prefix and role_suffix with one entry per role (got 0, 0 and 0)",
      "hint: role_names = 'user', 'assistant'  role_prefix = 'Q: ', 'A: '  role_suffix = '\\n', ''"]),
    ("eval_no_model", [task("ev1.in", "eval", "")], 2,
     ["&eval model = '': task = 'eval' needs a model: an HF directory (config.json + model.safetensors), e.g. a training run's out_dir/final"]),
    ("generate_no_model", [task("gn1.in", "generate", "")], 2,
     ["&generate model = '': task = 'generate' needs a model: an HF directory (config.json + model.safetensors), here or in &model init_from"]),
    ("ifd_no_inputs", [task("if1.in", "ifd", "")], 2,
     ["&ifd inputs = '': task = 'ifd' needs a JSONL file of instruction/response records"]),
]

GROUPS = {"cli": CLI, "deck": DECK, "tasks": TASKS}


def main():
    names = sys.argv[2:] or list(GROUPS)
    CASES = [c for g in names for c in GROUPS[g]]
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
