#!/usr/bin/env python3
"""produce.py FMHPC [GROUP...]: each case runs fmhpc (one process, no launcher) on a bad
command line or deck and asserts the exit status and the message(s) it must
print, as a user reads them. Cases are the catalogue's (docs/errors.md):
their expected texts are what ties an entry to the test that produces it.
Every case must fail as stated, or this test fails; it names the case.
The cases come in groups (one ctest each, errors.produce_GROUP, so that they
run in parallel); with no GROUP, all of them."""
import base64
import gzip
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

FMHPC = os.path.abspath(sys.argv[1])
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "data"))
import win_rewrite  # noqa: E402  (the window file layout's one Python reader)
L = os.path.join(ROOT, "inputs", "llama_nano.in")
G = os.path.join(ROOT, "inputs", "gpt2_nano.in")
tmp = tempfile.mkdtemp(prefix="fmhpc_produce_")


MADE = set()  # every file a case writes has its own name (cases are made before any runs)
AFTER = []  # (case, check): after all runs, check() returns None or what a case wrongly left changed


def deck(name, text):
    p = os.path.join(tmp, name)
    assert p not in MADE, f"produce.py: two cases write {name}"
    MADE.add(p)
    with open(p, "wb") as f:  # bytes as given (a deck that is not UTF-8); str as UTF-8
        f.write(text if isinstance(text, bytes) else text.encode())
    return p


# (name, argv, exit status, [texts that must appear in stdout+stderr: a string, or a compiled regex for
# a text with run-dependent parts such as hashes][, stdin: bytes, or a directory to read from])
CLI = [
    ("encode_no_path", ["--encode"], 2, ["fmhpc: --encode needs a tokenizer path"]),
    ("verify_no_path", ["--verify"], 2, ["fmhpc: --verify needs a store (a prep manifest .json or an .h5 shard)"]),
    ("plot_no_dir", ["--plot"], 2, ["fmhpc: --plot needs a run directory (&run out_dir)"]),
    ("ranks_not_a_count", ["--ranks", "x"], 2, ["fmhpc: --ranks needs a positive rank count"]),
    ("ranks_without_check", ["--ranks", "4", L], 2, ["fmhpc: --ranks only makes sense with --check"]),
    # a mode of its own given a deck, or another mode: refused (the deck was dropped without a word)
    ("mode_with_deck", ["--verify", L, L], 2,
     ["fmhpc: --verify runs on its own: it takes no deck", "hint: fmhpc --help shows each option's arguments"]),
    ("mode_with_mode", ["--verify", L, "--plot", tmp], 2,
     ["fmhpc: --verify runs on its own: it takes no other of --encode, --decode, --verify, --plot"]),
    ("unknown_option", ["--bogus"], 2, ["fmhpc: unknown option '--bogus'", "hint: fmhpc --help lists the options"]),
    ("deck_missing", [os.path.join(tmp, "nonexist.in")], 2,
     ["fmhpc: cannot read deck '" + os.path.join(tmp, "nonexist.in") + "': No such file or directory",
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
    # a repeat copies its string: 65536 copies of a 20 kB one took 1.3 GB and seconds before the count check
    ("repeat_text_too_large", ["--check", deck("d2b.in", "&prep inputs = 65536*'" + "x" * 300 + "' /\n")], 2,
     [":1:16: &prep inputs: the values hold more than 16 MiB of text (repeats expanded)"]),
    # a control character in a string (here an ANSI escape in the run name, replayed by every log line and message)
    ("string_control_char", ["--check", deck("d2c.in", "&run name = 'a\x1b[31mred' /\n")], 2,
     [":1:13: &run name = 'a?[31mred': the string holds control character 0x1b at byte 2",
      "hint: keys that take a newline or tab read the escapes \\n and \\t (role_prefix, ...)"]),
    # a grammar error quotes the deck's bytes: an escape sequence there was replayed to the terminal
    ("grammar_control_char", ["--check", deck("d2d.in", "&run na\x1b[31mme = 1 /\n")], 2,
     [":1:8: &run na: expected '=' after 'na', got '?[31mme'"]),
    # a no-break space pasted after a value looks like a blank: its code point is named ('\xc2' was printed alone)
    ("nbsp_after_value", ["--check", deck("d2e.in", "&optim lr = 3\u00a0/\n")], 2,
     [":1:14: &optim lr: unexpected character U+00A0 (a no-break space: retype it as a blank) after the value '3'; "
      "separate values with commas or blanks"]),
    ("byte_after_value", ["--check", deck("d2f.in", b"&optim lr = 3\xff/\n")], 2,
     [":1:14: &optim lr: unexpected byte 0xFF after the value '3'"]),
    # a name with a letter outside ASCII was cut at it: "&r: unknown group" for &rérun
    ("group_name_non_ascii", ["--check", deck("d2g.in", "&r\u00e9run task = 'train' /\n")], 2,
     [":1:3: name 'r\u00e9run' has character U+00E9: names are ASCII letters, digits and '_'"]),
    ("key_name_non_ascii", ["--check", deck("d2h.in", "&optim l\u00e9arning_rate = 1 /\n")], 2,
     [":1:9: &optim: name 'l\u00e9arning_rate' has character U+00E9: names are ASCII letters, digits and '_'"]),
    ("null_value", ["--check", deck("d3.in", "&prep inputs = 2* /\n")], 2,
     [":1:16: &prep inputs: expected a value right after '2*' (null values are not supported; write e.g. 4*0.0)"]),
    ("too_many_values", ["--check", deck("d4.in", "&prep inputs = " + ", ".join(["'a'"] * 100) + " /\n")], 2,
     ["&prep inputs: too many values: inputs holds at most 64, got 100 from element 1"]),
]




def dangling(name):
    """A directory holding b.jsonl and a.jsonl, a symlink to a file that does not exist."""
    d = os.path.join(tmp, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "b.jsonl"), "w") as f:
        f.write('{"text": "hello"}\n')
    if not os.path.islink(os.path.join(d, "a.jsonl")):
        os.symlink(os.path.join(d, "gone.jsonl"), os.path.join(d, "a.jsonl"))
    return d


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
    # --check applies the optimizer's own rules too (a one-value lion_betas passed it; training refused)
    ("check_lion_one_beta", ["--check", L, "optim%name='lion'", "optim%lion_betas=0.5"], 2,
     ["<command line>:1:7: &optim lion_betas = 0.5: needs two values (beta1, beta2), got 1"]),
    # values the kernels take as float: 1e-300 became 0 there (every loss NaN with rope_theta), 1e300 inf
    ("rope_theta_float_zero", ["--check", os.path.join(ROOT, "inputs", "llama_nano.in"), "model%rope_theta=1e-300"], 2,
     ["<command line>:1:7: &model rope_theta = 1e-300: is 0 in float, as the RoPE kernels use it"]),
    ("norm_eps_float_zero", ["--check", os.path.join(ROOT, "inputs", "llama_nano.in"), "model%norm_eps=1e-300"], 2,
     ["<command line>:1:7: &model norm_eps = 1e-300: is 0 in float, as the norm kernels use it"]),
    # bytes that are not UTF-8 in a string: summary.json and metrics.jsonl held them raw (invalid JSON)
    ("deck_string_not_utf8", ["--check", L, deck("nu.in", b"&run name='bad\xffname' /\n")], 2,
     ["nu.in:1:11: &run name = 'bad?name': the string is not valid UTF-8 (byte 4 is 0xff)",
      "hint: save the deck as UTF-8 (iconv -f latin1 -t utf-8): strings are written into JSON"]),
    # a lone CR (classic Mac OS line ends) was a blank: '! c' hid the rest and the deck ran on its defaults
    ("lone_cr", ["--check", deck("cr.in", "&model d_model = 64 /\r! c\r&model n_head=3\r/\r")], 2,
     ["cr.in:1:22: a carriage return (\\r) without a line feed: lines must end in \\n (or \\r\\n); read as a blank, "
      "it would join lines and let a '!' comment hide the rest of the deck",
      "hint: convert the line ends, e.g. tr '\\r' '\\n' < deck > fixed.in"]),
    ("glob_matches_nothing", [deck("glob.in", "&run task='prep' /\n&prep inputs='nothing*.jsonl' tokenizer='x' output='o' /\n")], 2,
     ["glob.in:2:7: &prep inputs = 'nothing*.jsonl': 'nothing*.jsonl' matches no file",
      "hint: relative globs start in the directory fmhpc runs in"]),
    ("glob_dangling_symlink", [deck("dangle.in", "&run task='prep' /\n&prep inputs='" + dangling("dangle") + "/*.jsonl' tokenizer='x' output='o' /\n")], 2,
     [re.compile(r"dangle\.in:2:7: &prep inputs = '.*dangle/\*\.jsonl': '.*dangle/\*\.jsonl' matches .*dangle/a\.jsonl, "
                 r"which cannot be read: No such file or directory"),
      "hint: a symlink whose target is gone, or a file removed or unreadable: fix or remove it (ls -lL shows dangling links)"]),
    ("values_past_reader_limit", ["--check", deck("many.in", "&optim betas=" + ",".join(["0.9"] * 70000) + " /\n")], 2,
     ["many.in:1:262158: &optim betas: too many values (at most 65536)"]),
    ("out_of_range", ["--check", L, "model%d_model=-1"], 2, ["<command line>:1:15: &model d_model = -1: out of range: must be >= 1"]),
    # keys read into an int have ranges that fit one: keep = 2^32 became 0 and pruned every checkpoint, tp = 2^32 a
    # division by zero in --check
    ("int_key_too_large", ["--check", L, "ckpt%keep=4294967296"], 2, ["<command line>:1:11: &ckpt keep = 4294967296: out of range: must be in [1,1000000]"]),
    ("wrong_type", ["--check", L, "model%d_model='x'"], 2,
     ["<command line>:1:15: &model d_model = 'x': expected an integer, got a string"]),
    ("key_of_other_group", ["--check", L, "run%backend='cuda'"], 2,
     ["<command line>:1:5: &run backend: unknown key; expected a key of &run", "hint: 'backend' is a key of &train, not of &run"]),
    # --check refuses what training refuses: Sophia under tp > 1 (--check passed it once)
    ("check_sophia_tp", ["--check", "--ranks", "2", L, "parallel%tp=2", "optim%name='sophia'"], 2,
     ["<command line>:1:7: &optim name = 'sophia': 'sophia' samples from full-vocabulary logits each step, which are "
      "not gathered over &parallel tp = 2", "hint: adamw or lion under tp > 1, or tp = 1"]),
    ("tp_kv_heads", ["--check", "--ranks", "4", L, "parallel%tp=4"], 2,
     ["&parallel tp = 4: must divide the model's 2 key/value heads (each tp rank owns whole KV heads): valid tp values are 1, 2"]),
    ("tp_d_ff", ["--check", "--ranks", "4", L, "parallel%tp=2", "model%d_ff=351"], 2,
     ["&parallel tp = 2: must divide the model's 2 key/value heads (each tp rank owns whole KV heads and their query "
      "heads) and d_ff = 351 (the MLP's columns): valid tp values are 1"]),
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

# Small files to break: a byte-level tokenizer.json (the fuzz seed of GPT-2's
# first 268 tokens and <|endoftext|>), GPT-2 directories and tiktoken files
# made from it, JSONL corpora.
SEED = json.load(open(os.path.join(ROOT, "tests", "fuzz", "corpus", "tokenizer_json", "seed_gpt2"), encoding="utf-8"))


def raw(name, data):
    p = os.path.join(tmp, name)
    assert p not in MADE, f"produce.py: two cases write {name}"
    MADE.add(p)
    with open(p, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())
    return p


def tok_json(name, edit=None):
    """The seed tokenizer.json, changed by edit(d)."""
    d = json.loads(json.dumps(SEED))
    if edit:
        edit(d)
    return raw(name, json.dumps(d))


def vocab_set(key, value):
    return lambda d: d["model"]["vocab"].__setitem__(key, value)


def gpt2_dir(name, bpe):
    d = os.path.join(tmp, name)
    os.makedirs(d, exist_ok=True)
    enc = dict(SEED["model"]["vocab"], **{"<|endoftext|>": 268})
    raw(os.path.join(name, "encoder.json"), json.dumps(enc))
    raw(os.path.join(name, "vocab.bpe"), "#version: 0.2\n" + bpe)
    return d


def b64(b):
    return base64.b64encode(b).decode()


BYTES = [f"{b64(bytes([i]))} {i}\n" for i in range(256)]  # a tiktoken file's single-byte ranks
# 50257 ranks: r50k_base keeps 50256 for <|endoftext|>, which this file gives a token
R50K_FULL = BYTES + [f"{b64(bytes([1 + i // 256, i % 256]))} {256 + i}\n" for i in range(50001)]


def jsonl(name, lines):
    return raw(name, b"".join(x if isinstance(x, bytes) else x.encode() for x in lines))


TOK = tok_json("tok.json")
GOOD = jsonl("good.jsonl", ['{"text": "hello world, this is a document"}\n'] * 3)
BAD2 = jsonl("bad2.jsonl", ['{"text": "ok"}\n', '{"text": x}\n'])  # line 2, column 10: bad number
NOTEXT = jsonl("notext.jsonl", ['{"x": 1}\n'])
SFT = "mode='sft' sections='prompt=user','response=assistant' train_on='assistant'"
DECK_TMPL = "mode='sft' train_on='assistant' chat_template='deck' role_names='user','assistant' role_prefix='U','A' role_suffix='',''"


def prep(name, inputs, extra="", out=None):
    return deck(name, f"&run task='prep' /\n&prep inputs='{inputs}' tokenizer='{TOK}' output='{tmp}/out_{out or name}' "
                      f"seq_len=16 {extra} /\n")


def tok_task(name, inputs, extra=""):
    return deck(name, f"&run task='tokenizer' /\n&tokenizer inputs='{inputs}' output='{tmp}/{name}.json' {extra} /\n")


def dedup(name, inputs, extra=""):
    return deck(name, f"&run task='dedup' /\n&dedup inputs='{inputs}' fields='text' {extra} /\n")


HINT_JSON = "hint: the file must be strict JSON (RFC 8259)"
HINT_BAD = "hint: fix the record, or set &prep on_bad_record = 'skip' to count and skip bad records"

# Tokenizer files, through fmhpc --encode (src/tokenizer/load.c, vocab.c; the JSON reader src/core/json.c)
TOKENIZER = [
    ("json_control_char", ["--encode", raw("j1.json", '{"a": "x\ty"}')], 1,
     ["j1.json:1:9: control character 0x09 in string (must be escaped)", HINT_JSON]),
    ("json_bad_utf8", ["--encode", raw("j2.json", b'{"a": "x\xff"}')], 1, ["j2.json:1:9: invalid UTF-8 in string"]),
    ("json_short_u_escape", ["--encode", raw("j3.json", '{"a": "\\u12"}')], 1,
     ["j3.json:1:8: bad \\u escape (needs 4 hex digits)"]),
    ("json_lone_high", ["--encode", raw("j4.json", '{"a": "\\ud800x"}')], 1, ["j4.json:1:8: lone high surrogate \\uD800"]),
    ("json_lone_low", ["--encode", raw("j5.json", '{"a": "\\udc00"}')], 1, ["j5.json:1:8: lone low surrogate \\uDC00"]),
    ("json_bad_escape", ["--encode", raw("j6.json", '{"a": "\\q"}')], 1, ["j6.json:1:8: bad escape '\\q'"]),
    ("json_bad_number", ["--encode", raw("j7.json", '{"a": -}')], 1, ["j7.json:1:7: bad number"]),
    ("json_leading_zero", ["--encode", raw("j8.json", '{"a": 01}')], 1, ["j8.json:1:7: leading zero in number"]),
    ("json_exponent", ["--encode", raw("j9.json", '{"a": 1e}')], 1, ["j9.json:1:9: digit expected in exponent"]),
    ("json_key", ["--encode", raw("j10.json", '{1: 2}')], 1, ["j10.json:1:2: object key (a string) expected"]),
    ("json_colon", ["--encode", raw("j11.json", '{"a" 2}')], 1, ["j11.json:1:6: ':' expected after object key"]),
    ("json_trailing_comma", ["--encode", raw("j12.json", '{"a": 2,}')], 1, ["j12.json:1:9: trailing comma"]),
    ("json_comma", ["--encode", raw("j13.json", '{"a": 2 "b"}')], 1, ["j13.json:1:9: ',' or '}' expected"]),
    ("json_end", ["--encode", raw("j14.json", '{"a": ')], 1, ["j14.json:1:7: value expected, found end of input"]),
    ("json_after", ["--encode", raw("j15.json", '{"a": 1} x')], 1, ["j15.json:1:10: unexpected text after the JSON value"]),
    ("vocab_not_object", ["--encode", tok_json("v1.json", lambda d: d["model"].__setitem__("vocab", [1]))], 1,
     ["v1.json: model.vocab must be an object of token -> id"]),
    ("vocab_negative_id", ["--encode", tok_json("v2.json", vocab_set("zz", -1))], 1,
     ["v2.json: model.vocab[\"zz\"]: the id must be an integer in [0, 2^31-1)"]),
    ("vocab_not_bytelevel", ["--encode", tok_json("v3.json", vocab_set("a b", 5))], 1,
     ["v3.json: model.vocab[\"a b\"]: not a ByteLevel token",
      "hint: fmhpc supports byte-level BPE: every vocabulary token is GPT-2 ByteLevel text"]),
    ("vocab_id_taken", ["--encode", tok_json("v4.json", vocab_set("zz", 5))], 1,
     ["v4.json: model.vocab[\"zz\"]: id 5 is already another token's id"]),
    ("vocab_id_far", ["--encode", tok_json("v5.json", vocab_set("zz", 100000000))], 1,
     ["v5.json: model.vocab: id 100000000 is beyond the 270 tokens the file defines (at most 1293 here)",
      "hint: a vocabulary's ids are dense: 0 .. (number of tokens - 1), with few holes"]),
    ("vocab_missing_byte", ["--encode", tok_json("v7.json", lambda d: d["model"]["vocab"].pop("\u0100"))], 1,
     ["v7.json: the vocabulary has no token for byte 0x00 (ByteLevel \"\u0100\"): not a byte-level BPE",
      "hint: fmhpc supports byte-level BPE tokenizers (GPT-2, tiktoken, Llama 3, its own)"]),
    ("normalizer", ["--encode", tok_json("v6.json", lambda d: d.__setitem__("normalizer", {"type": "NFC"}))], 1,
     ["v6.json: normalizer type 'NFC': not supported: fmhpc encodes the bytes as given (no normalization)"]),
    ("gpt2_dir_without_encoder", ["--encode", os.path.join(tmp)], 1,
     [os.path.join(tmp, "encoder.json") + ": cannot read: No such file or directory"]),
    ("gpt2_merge_not_in_encoder", ["--encode", gpt2_dir("g1", "q zz\n")], 1,
     ["vocab.bpe line 2: merge 'q zz': the right token is not in encoder.json",
      "hint: vocab.bpe and encoder.json must come from the same tokenizer"]),
    # vocab.bpe emptied or cut short: it encoded byte by byte, or with the merges left (exit 0)
    ("gpt2_merges_empty", ["--encode", gpt2_dir("g3", "")], 1,
     [os.path.join(tmp, "g3", "vocab.bpe") + ": 0 merges, but encoder.json's 269 tokens need 12 (one for each token "
      "past the 256 bytes and <|endoftext|>): the file is cut short, empty or from another tokenizer",
      "hint: vocab.bpe and encoder.json must come whole from the same tokenizer"]),
    ("gpt2_merges_cut", ["--encode", gpt2_dir("g4", "\n".join(SEED["model"]["merges"][:-3]) + "\n")], 1,
     [os.path.join(tmp, "g4", "vocab.bpe") + ": 9 merges, but encoder.json's 269 tokens need 12"]),
    # a .json that is empty, starts with a BOM or is an array: it was taken for a tiktoken rank file
    ("json_empty", ["--encode", raw("empty.json", "")], 1,
     [os.path.join(tmp, "empty.json") + ":1:1: value expected, found end of input",
      "hint: the file must be strict JSON (RFC 8259)"]),
    ("json_bom", ["--encode", raw("bom.json", b"\xef\xbb\xbf{}")], 1,
     [os.path.join(tmp, "bom.json") + ": starts with a UTF-8 byte order mark (EF BB BF), which JSON does not allow "
      "(RFC 8259, 8.1)", "hint: remove the BOM, e.g. sed -i '1s/^\\xEF\\xBB\\xBF//' FILE"]),
    ("gpt2_not_a_merge", ["--encode", gpt2_dir("g2", "qzz\n")], 1,
     ["vocab.bpe line 2: not a merge: 'qzz'", "hint: each line of vocab.bpe is two tokens separated by one space"]),
    ("tiktoken_unknown_name", ["--encode", raw("foo.tiktoken", "".join(BYTES))], 1,
     ["foo.tiktoken: a tiktoken rank file does not say its pre-tokenizer pattern or special tokens, and the name "
      "'foo.tiktoken' is not a known encoding"]),
    ("tiktoken_malformed", ["--encode", raw("r50k_base.tiktoken", "".join(BYTES) + "xx\n")], 1,
     ["r50k_base.tiktoken line 257: malformed"]),
    ("tiktoken_rank_twice", ["--encode", raw("r50k_base_2.tiktoken", "".join(BYTES) + f"{b64(b'ab')} 5\n")], 1,
     ["r50k_base_2.tiktoken line 257: rank 5 appears twice"]),
    ("tiktoken_rank_far", ["--encode", raw("r50k_base_3.tiktoken", "".join(BYTES) + f"{b64(b'ab')} 900000000\n")], 1,
     ["r50k_base_3.tiktoken: line 257: rank 900000000 is beyond the 257 tokens the file defines (at most 1280 here)"]),
    # a file cut short at a line's end (an interrupted copy) parsed, and encoded text past its ranks to other ids
    ("tiktoken_cut_short", ["--encode", raw("cut_cl100k_base.tiktoken", "".join(R50K_FULL[:-1]))], 1,
     ["cut_cl100k_base.tiktoken: 50256 ranks, but cl100k_base has 100256 (the file is cut short, or holds another "
      "encoding)", "hint: copy the file again, or name it after the encoding it holds"]),
    ("tiktoken_special_taken", ["--encode", raw("r50k_base_4.tiktoken", "".join(R50K_FULL))], 1,
     ["r50k_base_4.tiktoken: rank 50256 is a token of the file, but r50k_base needs it for <|endoftext|>"]),
    ("tokenizer_unreadable", ["--encode", "/proc/self/mem"], 1, ["/proc/self/mem: cannot read: Input/output error"]),
    ("tokenizer_task_bad_json", [tok_task("k1.in", BAD2, "vocab_size=300")], 1,
     ["bad2.jsonl:2:10: malformed JSON: bad number"]),
    ("tokenizer_task_no_text", [tok_task("k2.in", NOTEXT, "vocab_size=300")], 1,
     ["notext.jsonl:1: record has no string field 'text'"]),
    ("tokenizer_task_specials", [tok_task("k3.in", GOOD, "vocab_size=257 special_tokens='<|a|>','<|b|>'")], 2,
     # the deck's place is named (the message was fm_bpe_train's, with no place, after the corpus was read)
     ["k3.in:2:108: &tokenizer vocab_size = 257: leaves 255 ids after the 2 special_tokens; at least 256 (one per byte) are needed"]),
    # refused before the corpus is read (it failed after the merges)
    ("tokenizer_task_unwritable", [deck("k4.in", f"&run task='tokenizer' /\n&tokenizer inputs='{GOOD}' output='/proc/nope/k4.json' vocab_size=300 /\n")], 1,
     ["&tokenizer output = '/proc/nope/k4.json': cannot be written: No such file or directory",
      "hint: checked before the corpus is read; point output at a writable directory"]),
    ("tokenizer_task_no_output", [deck("k7.in", f"&run task='tokenizer' /\n&tokenizer inputs='{GOOD}' output='' vocab_size=300 /\n")], 2,
     ["&tokenizer output = '': task = 'tokenizer' needs an output file"]),
    # its directory is made
    ("tokenizer_task_new_dir", [deck("k6.in", f"&run task='tokenizer' /\n&tokenizer inputs='{GOOD}' output='{tmp}/k6new/sub/k6.json' vocab_size=300 /\n")], 0,
     ["tokenizer: wrote " + tmp + "/k6new/sub/k6.json (2"]),
    # a vocabulary the corpus cannot fill is said (it was written smaller without a word)
    ("tokenizer_task_short_vocab", [tok_task("k5.in", GOOD, "vocab_size=100000")], 0,
     ["fmhpc: warning: tokenizer: the corpus gave ", " ids, fewer than &tokenizer vocab_size = 100000: no pair is left that "
      "occurs min_frequency = 2 times or more; a model deck for this tokenizer needs vocab_size >= "]),
]

# dedup's outputs against each other and its inputs (a report over the input replaced its records; output equal to
# dropped mixed both into one file; a kept file that failed left a new dropped file and a .partial)
DD7 = jsonl("dd7.jsonl", ['{"text": "hello world, this is a document"}\n'] * 3)
os.makedirs(os.path.join(tmp, "dd8"), exist_ok=True)
AFTER.append(("dedup_report_is_input", lambda: None if open(DD7).read().count("hello") == 3 else DD7 + " changed"))
AFTER.append(("dedup_output_is_dir", lambda: next((f + " left" for f in ("d8x.jsonl", "d8x.jsonl.partial", "dd8.partial")
                                                  if os.path.exists(os.path.join(tmp, f))), None)))

# Corpora and their tasks: prep (src/data/prep*.c, JSONL readers src/core/jsonl.c), dedup
DATA = [
    ("prep_bad_json", [prep("p1.in", BAD2)], 1,
     ["bad2.jsonl:2: column 10: malformed JSON: bad number", HINT_BAD]),
    # in the output the error above left (a work directory with a fingerprint and no window): its hint is taken
    # (it used to fail as 'committed windows of a different prep')
    ("prep_skip_bad_json", [prep("p1b.in", BAD2, "on_bad_record='skip' min_chars=1", out="p1.in")], 0,
     ["bad2.jsonl:2: skipped: column 10: malformed JSON: bad number"]),
    # refused before any shard is written (it exited 0 and replaced the shards of a store already there)
    ("prep_empty_train_split", [prep("p0.in", jsonl("a0.jsonl", ['{"text": "short"}\n']))], 1,
     ["prep: the train split would hold no document: 1 records read, 1 shorter than min_chars = 50, 0 longer than "
      "max_chars = 2000000, 0 bad records skipped, 0 longer than a row dropped by packing = 'bfd', 0 documents to valid",
      "hint: check &prep text_field / mode against the JSONL, min_chars, max_chars, packing and valid_fraction; "
      "nothing was written"]),
    ("prep_record_not_object", [prep("p2.in", jsonl("a2.jsonl", ['[1]\n']))], 1,
     ["a2.jsonl:1: the record is a JSON array, expected an object", HINT_BAD]),
    # a key twice: the first value was taken, where Python's json takes the last
    ("prep_duplicate_key", [prep("p3d.in", jsonl("a3d.jsonl", ['{"text": "ab", "text": "abcdefghijkl mnop"}\n']))], 1,
     ["a3d.jsonl:1: key 'text' appears twice (which value is meant? JSON readers differ: the first or the last)"]),
    ("prep_text_not_string", [prep("p3.in", jsonl("a3.jsonl", ['{"text": 5}\n']))], 1,
     ["a3.jsonl:1: field 'text' is number, expected a string"]),
    ("prep_bad_utf8", [prep("p4.in", jsonl("a4.jsonl", [b'{"text": "a\xff"}\n']))], 1,
     ["a4.jsonl:1: invalid UTF-8 at byte 12 of the line"]),
    ("prep_no_records", [prep("p5.in", jsonl("a5.jsonl", ['\n']))], 1,
     ["prep: the inputs hold no records", "hint: check &prep inputs"]),
    ("prep_gzip_cut", [prep("p6.in", raw("cut.jsonl.gz", gzip.compress(b'{"text": "hello world"}\n' * 100)[:40]))], 1,
     ["cut.jsonl.gz: truncated gzip stream after 40 raw bytes", "hint: the file was cut short; recompress it"]),
    ("prep_gzip_corrupt", [prep("p7.in", raw("bad.jsonl.gz", b"\x1f\x8b\x08\x00garbagegarbagegarbage"))], 1,
     ["bad.jsonl.gz: gzip error near raw byte 18: invalid code lengths set"]),
    ("prep_zstd_corrupt", [prep("p8.in", raw("bad.jsonl.zst", b"\x28\xb5\x2f\xfdgarbagegarbage"))], 1,
     ["bad.jsonl.zst: zstd error: "]),
    ("prep_bad_tokenizer", [deck("p9.in", f"&run task='prep' /\n&prep inputs='{GOOD}' tokenizer='{tmp}/v1.json' output='{tmp}/o9' /\n")], 1,
     ["v1.json: model.vocab must be an object of token -> id",
      "hint: &prep tokenizer names a tokenizer.json, a *.tiktoken file or a GPT-2 directory"]),
    ("prep_tokenizer_without_eos", [deck("p10.in", f"&run task='prep' /\n&prep inputs='{GOOD}' output='{tmp}/o10' "
                                                   f"tokenizer='{tok_json('noeos.json', lambda d: d.__setitem__('added_tokens', []))}' /\n")], 1,
     ["noeos.json: the tokenizer has no end-of-document token", "hint: add '<|endoftext|>' as a special token"]),
    # a pre-tokenizer regex that backtracks past PCRE2's limit on a long run: the tokenizer's failure, named as such
    # (the hint said to fix or skip the record, and skipping could not help)
    ("prep_regex_limit", [deck("p20.in", f"&run task='prep' /\n&prep inputs='{jsonl('cat.jsonl', [json.dumps({'text': 'a' * 5000 + 'b'}) + chr(10)])}' "
                                         f"output='{tmp}/o20' seq_len=16 min_chars=1 tokenizer='"
                                         + tok_json("cat.json", lambda d: d.__setitem__("pre_tokenizer", {"type": "Sequence", "pretokenizers": [
                                             {"type": "Split", "pattern": {"Regex": "(a|a)+$"}, "behavior": "Isolated", "invert": False},
                                             {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]})) + "' /\n")], 1,
     ["tokenizer: pre-tokenizer regex failed at byte 0 of a 5001-byte text: match limit exceeded",
      "cat.jsonl:1: the tokenizer failed: invalid argument",
      "hint: the tokenizer failed on this record's text (see above): check &prep tokenizer = '" + os.path.join(tmp, "cat.json")
      + "' (a pre-tokenizer regex that backtracks too much, e.g. nested quantifiers, fails on long runs)"]),
    ("prep_output_unwritable", [deck("p17.in", f"&run task='prep' /\n&prep inputs='{GOOD}' tokenizer='{TOK}' output='/proc/nope' /\n")], 1,
     ["/proc/nope/.prep_work: cannot create: No such file or directory", "hint: &prep output must be a writable directory"]),
    ("sft_section_not_string", [prep("p12.in", jsonl("s1.jsonl", ['{"prompt": 5, "response": "b"}\n']), SFT)], 1,
     ["s1.jsonl:1: section 'prompt' is number, expected a string"]),
    ("sft_messages_not_list", [prep("p13.in", jsonl("s2.jsonl", ['{"messages": 5}\n']), "mode='sft' train_on='assistant'")], 1,
     ["s2.jsonl:1: field 'messages' is number, expected a list of 1..256 {role, content} turns"]),
    ("sft_turn_fields", [prep("p14.in", jsonl("s3.jsonl", ['{"messages": [{"role": "user"}]}\n']), "mode='sft' train_on='assistant'")], 1,
     ["s3.jsonl:1: messages[0] needs string fields 'role' and 'content'"]),
    ("sft_unknown_role", [prep("p15.in", jsonl("s4.jsonl", ['{"messages": [{"role": "bot", "content": "a longer piece of content, past min_chars"}, '
                                                             '{"role": "assistant", "content": "a longer piece of content, past min_chars"}]}\n']), DECK_TMPL)], 1,
     ["s4.jsonl:1: role 'bot' is not in the deck template's role_names"]),
    # train_on matching no turn of the data (a misspelt role): the store's loss mask was 0 everywhere, and training
    # on it ran at loss 0.000000 without a word; with sections every role is known from the deck
    ("sft_train_on_matches_nothing", [prep("p18.in", jsonl("s6.jsonl", ['{"messages": [{"role": "user", "content": '
                                                                        '"a longer piece of content, past min_chars"}, '
                                                                        '{"role": "assistant", "content": "a longer '
                                                                        'piece of content, past min_chars"}]}\n']),
                                           "mode='sft' train_on='asistant' chat_template='chatml'")], 1,
     ["prep: &prep train_on = 'asistant' trains no token: no turn of the 1 train documents has a role it names, so the "
      "loss mask would be 0 everywhere",
      "hint: name roles of the records' 'messages' turns (e.g. 'assistant'); nothing was written"]),
    ("sft_train_on_no_section", [prep("p19.in", jsonl("s7.jsonl", ['{"prompt": "a", "response": "b"}\n']),
                                      "mode='sft' sections='prompt=user','response=assistant' train_on='reply'")], 2,
     ["&prep train_on = 'reply': 'reply' is none of the sections' fields or roles",
      "hint: sections are 'prompt' (role 'user') 'response' (role 'assistant')"]),
    # a role from the data is put into a built-in template's prefix, which is encoded with special tokens on: a
    # role holding one's text used to put a real <|endoftext|> into the document
    ("sft_role_special_token", [prep("p16.in", jsonl("s5.jsonl", ['{"messages": [{"role": "user<|endoftext|>", "content": '
                                                                  '"a longer piece of content, past min_chars"}, {"role": '
                                                                  '"assistant", "content": "a longer piece of content, past '
                                                                  'min_chars"}]}\n']), "mode='sft' train_on='assistant' "
                                                                                       "chat_template='chatml'")], 1,
     ["s5.jsonl:1: role 'user<|endoftext|>' holds the special token '<|endoftext|>': a role from the data is text, "
      "never a special token", HINT_BAD]),
    ("dedup_bad_json", [dedup("dedup1.in", BAD2, f"output='{tmp}/d1.jsonl'")], 1,
     ["bad2.jsonl:2:10: malformed JSON: bad number", "hint: every non-blank line must be one JSON object"]),
    ("dedup_no_field", [dedup("dedup2.in", NOTEXT, f"output='{tmp}/d2.jsonl'")], 1,
     ["notext.jsonl:1: record has no string field 'text'", "hint: set &dedup fields to the record's text fields"]),
    ("dedup_output_unwritable", [dedup("dedup3.in", GOOD, "output='/proc/nope/d3.jsonl'")], 1,
     ["/proc/nope/d3.jsonl: cannot create: No such file or directory", "hint: check &dedup output"]),
    ("dedup_dropped_unwritable", [dedup("dedup4.in", GOOD, f"output='{tmp}/d4.jsonl' dropped='/proc/nope/x'")], 1,
     ["/proc/nope/x: cannot create: No such file or directory", "hint: check &dedup dropped"]),
    ("dedup_report_unwritable", [dedup("dedup5.in", GOOD, f"output='{tmp}/d5.jsonl' report='/proc/nope/x'")], 1,
     ["/proc/nope/x: cannot create: No such file or directory", "hint: check &dedup report"]),
    ("dedup_output_is_dropped", [dedup("dedup6.in", GOOD, f"output='{tmp}/d6.jsonl' dropped='{tmp}/./d6.jsonl'")], 2,
     ["&dedup dropped = '" + tmp + "/./d6.jsonl': is the same file as &dedup output: each output needs its own file"]),
    ("dedup_report_is_input", [dedup("dedup7.in", DD7, f"output='{tmp}/d7.jsonl' report='{DD7}'")], 2,
     ["&dedup report = '" + DD7 + "': is an input of this dedup (" + DD7 + "): writing it would replace the records "
      "it reads", "hint: write the report to another file"]),
    ("dedup_output_is_dir", [dedup("dedup8.in", GOOD, f"output='{tmp}/dd8' dropped='{tmp}/d8x.jsonl'")], 1,
     [tmp + "/dd8: cannot write: Is a directory"]),
]


# A model to break: a tiny Llama trained for 2 steps on a store prepped here with the seed tokenizer
# (fmhpc writes them, in the group's setup), then changed one way per case.
MODEL = ("&model arch='llama' d_model=16 n_layer=1 n_head=2 n_kv_head=1 d_ff=32 vocab_size=269 seq_len=16 /\n")


def run_ok(argv, what, status=0):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    r = subprocess.run([FMHPC] + argv, capture_output=True, text=True, timeout=300, env=env, cwd=tmp)
    if r.returncode != status:
        sys.exit(f"FAIL: making the fixture ({what}) failed with status {r.returncode}:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")


def trained():
    """tmp/fx: corpus.jsonl, store/{train,valid}.json, run/ckpt/step_*.h5, run/final (config.json, model.safetensors)."""
    fx = os.path.join(tmp, "fx")
    if os.path.isdir(os.path.join(fx, "run", "final")):
        return fx
    os.makedirs(fx, exist_ok=True)
    jsonl(os.path.join("fx", "corpus.jsonl"),
          [json.dumps({"text": f"hello world, this is document number {i} of a tiny corpus for tests."}) + "\n"
           for i in range(40)])
    run_ok([deck(os.path.join("fx", "prep.in"),
                 f"&run task='prep' /\n&prep inputs='{fx}/corpus.jsonl' tokenizer='{TOK}' output='{fx}/store' "
                 "seq_len=16 min_chars=1 valid_fraction=0.2 /\n")], "prep")
    run_ok([deck(os.path.join("fx", "train.in"),
                 f"&run task='train' out_dir='{fx}/run' /\n{MODEL}&data train='{fx}/store/train.json' "
                 f"valid='{fx}/store/valid.json' /\n&train steps=2 global_batch=2 micro_batch=1 /\n"
                 "&optim warmup_steps=0 /\n&ckpt every=1 /\n&log plot=.false. /\n")], "train")
    return fx


def hf_dir(name, header=None, data=None, raw_header=None, raw_file=None, config=None, raw_config=None,
           safetensors=True):
    """A copy of the trained run's final/ with its safetensors header changed by header(h) or replaced by
    raw_header, its data replaced, the whole file replaced, or config.json changed by config(c)."""
    fx = trained()
    st = open(os.path.join(fx, "run", "final", "model.safetensors"), "rb").read()
    n = int.from_bytes(st[:8], "little")
    h, body = json.loads(st[8:8 + n]), st[8 + n:]
    c = json.load(open(os.path.join(fx, "run", "final", "config.json")))
    d = os.path.join(tmp, name)
    os.makedirs(d, exist_ok=True)
    if config:
        config(c)
    raw(os.path.join(name, "config.json"), raw_config if raw_config is not None else json.dumps(c))
    if raw_file is not None:
        raw(os.path.join(name, "model.safetensors"), raw_file)
    elif safetensors:
        if header:
            header(h)
        hb = raw_header if raw_header is not None else json.dumps(h).encode()
        raw(os.path.join(name, "model.safetensors"), len(hb).to_bytes(8, "little") + hb + (body if data is None else data))
    return d


def symlinked_hf(name, target):
    """An out_dir whose hf/ is a symlink to target (an existing directory): export's mkdirs accepts it."""
    d = os.path.join(tmp, name)
    os.makedirs(d, exist_ok=True)
    link = os.path.join(d, "hf")
    if not os.path.islink(link):
        os.symlink(target, link)
    return d


def hf_index(name, index):
    """An HF directory with config.json and a model.safetensors.index.json (a sharded model's)."""
    d = hf_dir(name, safetensors=False)
    raw(os.path.join(name, "model.safetensors.index.json"), json.dumps(index))
    return d


def raw_file_at(name, data):
    p = os.path.join(tmp, name)
    with open(p, "wb") as f:
        f.write(data)
    return p


def generate(name, model, extra=""):
    return deck(name, f"&run task='generate' out_dir='{tmp}/gen' /\n{MODEL}&generate model='{model}' "
                      f"tokenizer='{TOK}' prompts='hello' max_tokens=4 {extra} /\n")


EMB = "model.embed_tokens.weight"
NORM0 = "model.layers.0.input_layernorm.weight"


def entry(name, edit):
    return lambda h: edit(h[name])


def config_set(key, value):
    return lambda c: c.__setitem__(key, value)


HINT_ST = "hint: the file is truncated or corrupted, or not a safetensors file: copy or download it again"
HINT_CFG = "hint: this model cannot be loaded into fmhpc's llama as it is"


def interop_cases():
    """Safetensors files and config.json of HF model directories (src/interop), through task = 'generate'."""
    fx = trained()
    st = open(os.path.join(fx, "run", "final", "model.safetensors"), "rb").read()
    hdr = json.loads(st[8:8 + int.from_bytes(st[:8], "little")])
    header_twice = json.dumps(hdr).encode()[:-1] + b', "' + EMB.encode() + b'": ' + json.dumps(hdr[EMB]).encode() + b"}"
    body = st[8 + int.from_bytes(st[:8], "little"):]
    os.makedirs(os.path.join(tmp, "cfg_is_dir", "config.json"), exist_ok=True)
    nan_at = hdr[NORM0]["data_offsets"][0] + 3 * {"F32": 4, "BF16": 2, "F16": 2}[hdr[NORM0]["dtype"]]
    nan = {"F32": struct.pack("<f", float("nan")), "BF16": b"\xc0\x7f", "F16": b"\x00\x7e"}[hdr[NORM0]["dtype"]]
    nan_body = body[:nan_at] + nan + body[nan_at + len(nan):]
    # a FIFO where a file is read: an error, not an open() that waits for a writer forever (the run's timeout)
    os.mkfifo(os.path.join(hf_dir("fifo_st", safetensors=False), "model.safetensors"))
    os.mkfifo(os.path.join(hf_dir("fifo_ix", safetensors=False), "model.safetensors.index.json"))
    os.symlink("/dev/zero", os.path.join(hf_dir("zero_ix", safetensors=False), "model.safetensors.index.json"))
    with open(os.path.join(hf_dir("big_ix", safetensors=False), "model.safetensors.index.json"), "wb") as f:
        f.truncate(17 << 20)  # sparse: a size, no data
    gpt2_cfg = {"model_type": "gpt2", "n_embd": 4 * 10**18, "n_layer": 1, "n_head": 2, "n_positions": 16,
                "vocab_size": 269}
    gpt2 = deck("c18.in", f"&run task='generate' out_dir='{tmp}/gen' /\n&model arch='gpt2' d_model=16 n_layer=1 n_head=2 "
                          f"vocab_size=269 seq_len=16 /\n&generate model='{hf_dir('c18', raw_config=json.dumps(gpt2_cfg))}' "
                          f"tokenizer='{TOK}' prompts='hello' max_tokens=4 /\n")
    # export over an hf/ whose config.json cannot be replaced (a directory): the old weights stay, no temporaries
    old = os.path.join(tmp, "x14", "hf")
    os.makedirs(os.path.join(old, "config.json"), exist_ok=True)
    raw(os.path.join("x14", "hf", "model.safetensors"), b"old weights")
    AFTER.append(("export_config_fails", lambda: None if open(os.path.join(old, "model.safetensors"), "rb").read() == b"old weights"
                  and sorted(os.listdir(old)) == ["config.json", "model.safetensors"] else f"{old} changed: {os.listdir(old)}"))
    return [
        # a prompt with a NUL: refused at its line (it was cut there, silently)
        ("generate_prompt_nul", [generate("s41.in", os.path.join(fx, "run", "final"),
                                          "prompts_file='" + raw_file_at("s41.jsonl", b'{"prompt": "nul \\u0000 byte"}\n') + "'")], 1,
         ["error: " + os.path.join(tmp, "s41.jsonl") + ":1: the prompt holds a NUL character (\\u0000), which generation "
          "cannot take", "hint: remove it from the prompt"]),
        # weights that are not finite: refused at the import (they were loaded, and generate printed from NaN logits)
        ("st_weight_nan", [generate("s40.in", hf_dir("s40", data=nan_body))], 1,
         ["s40/model.safetensors: tensor model.layers.0.input_layernorm.weight: element 3 of [16] is NaN: a model's "
          "weights must be finite",
          "hint: the model was saved after it diverged, or the file is damaged: use an earlier checkpoint"]),
        ("st_metadata_not_object", [generate("s1.in", hf_dir("s1", lambda h: h.__setitem__("__metadata__", 5)))], 1,
         ["s1/model.safetensors: \"__metadata__\" is a JSON number, not an object"]),
        ("st_metadata_member", [generate("s2.in", hf_dir("s2", lambda h: h.__setitem__("__metadata__", {"a": 5})))], 1,
         ["s2/model.safetensors: \"__metadata__\" member \"a\" is a JSON number, not a string"]),
        ("st_metadata_nul", [generate("s3.in", hf_dir("s3", lambda h: h.__setitem__("__metadata__", {"a": "x\u0000y"})))], 1,
         ["s3/model.safetensors: \"__metadata__\" holds a NUL character"]),
        ("st_shape_not_array", [generate("s4.in", hf_dir("s4", entry(EMB, lambda e: e.__setitem__("shape", 5))))], 1,
         ["s4/model.safetensors: tensor \"model.embed_tokens.weight\": \"shape\" is a JSON number, not an array of sizes"]),
        ("st_shape_dims", [generate("s5.in", hf_dir("s5", entry(EMB, lambda e: e.__setitem__("shape", [1] * 20))))], 1,
         ["tensor \"model.embed_tokens.weight\": shape has 20 dimensions; fmhpc reads at most 8"]),
        ("st_offsets_not_pair", [generate("s6.in", hf_dir("s6", entry(EMB, lambda e: e.__setitem__("data_offsets", 5))))], 1,
         ["tensor \"model.embed_tokens.weight\": \"data_offsets\" must be an array [begin, end]"]),
        ("st_entry_not_object", [generate("s7.in", hf_dir("s7", lambda h: h.__setitem__(EMB, 5)))], 1,
         ["tensor \"model.embed_tokens.weight\": entry is a JSON number, not an object {dtype, shape, data_offsets}"]),
        ("st_unknown_member", [generate("s8.in", hf_dir("s8", entry(EMB, lambda e: e.__setitem__("x", 5))))], 1,
         ["tensor \"model.embed_tokens.weight\": unknown member \"x\"", "hint: an entry has exactly dtype, shape and data_offsets"]),
        ("st_no_dtype", [generate("s9.in", hf_dir("s9", entry(EMB, lambda e: e.pop("dtype"))))], 1,
         ["tensor \"model.embed_tokens.weight\": no \"dtype\""]),
        ("st_unknown_dtype", [generate("s10.in", hf_dir("s10", entry(EMB, lambda e: e.__setitem__("dtype", "Q9"))))], 1,
         ["tensor \"model.embed_tokens.weight\": unknown dtype \"Q9\"",
          "hint: known dtypes: BOOL U8 I8 F8_E5M2 F8_E4M3 I16 U16 F16 BF16 I32 U32 F32 F64 I64 U64"]),
        ("st_elements_overflow", [generate("s11.in", hf_dir("s11", entry(EMB, lambda e: e.__setitem__("shape", [2**40, 2**40]))))], 1,
         ["tensor \"model.embed_tokens.weight\": shape's element count overflows 64 bits", HINT_ST]),
        ("st_bytes_overflow", [generate("s12.in", hf_dir("s12", entry(EMB, lambda e: e.__setitem__("shape", [2**31, 2**31]))))], 1,
         ["tensor \"model.embed_tokens.weight\": shape's byte count overflows 64 bits"]),
        ("st_offsets_reversed", [generate("s13.in", hf_dir("s13", entry(EMB, lambda e: e.__setitem__("data_offsets", [10, 5]))))], 1,
         ["tensor \"model.embed_tokens.weight\": data_offsets [10, 5] end before they begin"]),
        ("st_truncated", [generate("s14.in", hf_dir("s14", data=body[:-100]))], 1,
         ["tensor \"model.layers.0.self_attn.v_proj.weight\": data_offsets [26048, 26560] run past the data region, "
          "which is 26524 bytes (file truncated?)"]),
        ("st_overlap", [generate("s15.in", hf_dir("s15", entry(NORM0, lambda e: e.__setitem__("data_offsets", [0, 64]))))], 1,
         ["tensor \"model.embed_tokens.weight\": data_offsets [0, 17216] overlap those of tensor "
          "\"model.layers.0.input_layernorm.weight\""]),
        ("st_trailing_bytes", [generate("s16.in", hf_dir("s16", data=body + b"\0" * 16))], 1,
         ["s16/model.safetensors: 16 bytes after the last tensor's data (data region 26640 bytes, tensors end at 26624)",
          "hint: the spec requires tensors to cover the data region without holes"]),
        ("st_name_twice", [generate("s17.in", hf_dir("s17", raw_header=header_twice))], 1,
         ["tensor \"model.embed_tokens.weight\": appears twice in the header", "hint: the spec disallows duplicate names"]),
        ("st_header_not_object", [generate("s18.in", hf_dir("s18", raw_header=b"[1]"))], 1,
         ["s18/model.safetensors: the header does not start with '{' (the spec requires a JSON object)"]),
        ("st_header_json", [generate("s19.in", hf_dir("s19", raw_header=b"{\"a\": }"))], 1,
         ["s19/model.safetensors: header JSON at line 1, column 7 (byte 14 of the file): bad number"]),
        ("st_name_nul", [generate("s20.in", hf_dir("s20", lambda h: h.__setitem__("a\u0000b", h.pop(EMB))))], 1,
         ["s20/model.safetensors: a tensor name holds a NUL character"]),
        ("st_too_short", [generate("s21.in", hf_dir("s21", raw_file=b"abc"))], 1,
         ["s21/model.safetensors: the file is 3 bytes, too short for the 8-byte header length"]),
        ("st_header_past_end", [generate("s22.in", hf_dir("s22", raw_file=(10**6).to_bytes(8, "little") + b"{}"))], 1,
         ["s22/model.safetensors: header length 1000000 runs past the end of the file (10 bytes): the file is truncated"]),
        ("st_integer_dtype", [generate("s23.in", hf_dir("s23", entry(EMB, lambda e: e.__setitem__("dtype", "I32"))))], 1,
         ["tensor \"model.embed_tokens.weight\": dtype I32 is not a floating-point type fmhpc converts",
          "hint: weights are read from F32, F16, BF16 or F64 tensors"]),
        ("st_missing", [generate("s24.in", hf_dir("s24", safetensors=False))], 1,
         ["s24/model.safetensors: cannot open: No such file or directory", "hint: check the path and permissions"]),
        ("st_hole", [generate("s25.in", hf_dir("s25", lambda h: h.pop(NORM0)))], 1,
         ["tensor \"model.layers.0.mlp.down_proj.weight\": data_offsets begin at 17280, leaving a hole of 64 bytes after "
          "the previous tensor"]),
        ("config_integer", [generate("c1.in", hf_dir("c1", config=config_set("hidden_size", "16")))], 2,
         ["c1/config.json: \"hidden_size\" must be an integer, not a JSON string", HINT_CFG]),
        ("config_number", [generate("c2.in", hf_dir("c2", config=config_set("rms_norm_eps", "x")))], 2,
         ["c2/config.json: \"rms_norm_eps\" must be a number, not a JSON string"]),
        ("config_bool", [generate("c3.in", hf_dir("c3", config=config_set("tie_word_embeddings", 1)))], 2,
         ["c3/config.json: \"tie_word_embeddings\" must be true or false, not a JSON number"]),
        ("config_string", [generate("c4.in", hf_dir("c4", config=config_set("hidden_act", 1)))], 2,
         ["c4/config.json: \"hidden_act\" must be a string, not a JSON number"]),
        # a key twice: transformers keeps the last value, fmhpc read the first (two models from one file)
        ("config_key_twice", [generate("c20.in", hf_dir("c20", raw_config=json.dumps(json.load(open(os.path.join(
            fx, "run", "final", "config.json"))))[:-1] + ', "hidden_size": 32}'))], 1,
         ["c20/config.json: key \"hidden_size\" appears twice in one object (transformers keeps the last value; which one "
          "is meant?)", "hint: keep one of them"]),
        ("config_not_object", [generate("c5.in", hf_dir("c5", raw_config="[1]"))], 2, ["c5/config.json: not a JSON object", HINT_CFG]),
        ("config_bad_json", [generate("c6.in", hf_dir("c6", raw_config="{\"a\": 01}"))], 1, ["c6/config.json:1:7: leading zero in number"]),
        ("config_no_model_type", [generate("c7.in", hf_dir("c7", config=lambda c: c.pop("model_type")))], 2,
         ["c7/config.json: no \"model_type\" string; the deck's &model arch is 'llama'"]),
        ("config_model_type", [generate("c8.in", hf_dir("c8", config=config_set("model_type", "gpt2")))], 2,
         ["c8/config.json: \"model_type\" = \"gpt2\" but the deck's &model arch = 'llama'"]),
        ("config_positions", [generate("c9.in", hf_dir("c9", config=config_set("max_position_embeddings", 8)))], 2,
         ["c9/config.json: \"max_position_embeddings\" = 8 but the deck's &model seq_len = 16 is longer",
          "hint: to match this model, set in the deck: &model seq_len = 8 /"]),
        ("config_positions_type", [generate("c10.in", hf_dir("c10", config=config_set("max_position_embeddings", "x")))], 2,
         ["c10/config.json: \"max_position_embeddings\" must be an integer"]),
        ("config_rope_scaling", [generate("c11.in", hf_dir("c11", config=config_set("rope_scaling", {"type": "llama3"})))], 2,
         ["c11/config.json: \"rope_scaling\" asks for rope_type \"llama3\": fmhpc implements plain RoPE only (null, or "
          "rope_type \"default\"), e.g. Llama 2 and 3, not 3.1's scaled RoPE"]),
        # transformers' spellings of plain RoPE load: {"rope_type": "default"}, and v5's rope_parameters with the
        # theta inside (the trained fixture's is 10000, as the deck's)
        ("config_rope_default", [generate("c21.in", hf_dir("c21", config=config_set("rope_scaling", {"rope_type": "default"})))],
         0, ["generate: 1 prompts, batches of 1"]),
        ("config_rope_parameters", [generate("c22.in", hf_dir("c22", config=lambda c: (c.pop("rope_theta"), c.pop("rope_scaling"),
            c.__setitem__("rope_parameters", {"rope_type": "default", "rope_theta": 500000.0}))))], 2,
         ["c22/config.json: \"rope_theta\" = 500000 but the deck's &model rope_theta = 10000"]),
        ("config_differs", [generate("c12.in", hf_dir("c12", config=config_set("hidden_size", 32)))], 2,
         ["c12/config.json: \"hidden_size\" = 32 but the deck's &model d_model gives 16",
          "hint: to match this model, set in the deck: &model d_model = 32 /"]),
        ("config_activation", [generate("c13.in", hf_dir("c13", config=config_set("hidden_act", "relu")))], 2,
         ["c13/config.json: \"hidden_act\" = \"relu\": fmhpc's Llama MLP is SwiGLU (silu)"]),
        ("index_no_weight_map", [generate("ix1.in", hf_index("x1", {"a": 1}))], 1,
         ["x1/model.safetensors.index.json: no \"weight_map\" object"]),
        ("index_path_outside", [generate("ix2.in", hf_index("x2", {"weight_map": {"a": "../x.safetensors"}}))], 1,
         ["x2/model.safetensors.index.json: weight_map entry 0 is not a plain file name in the same directory"]),
        ("index_no_files", [generate("ix3.in", hf_index("x3", {"weight_map": {}}))], 1,
         ["x3/model.safetensors.index.json: \"weight_map\" names no files"]),
        ("tensor_shape", [generate("ix5.in", hf_dir("x5", entry(EMB, lambda e: e.__setitem__("shape", [16, 269]))))], 1,
         ["x5/model.safetensors: tensor model.embed_tokens.weight: shape [16, 269] but the deck's model needs [269, 16] (fmhpc's wte)",
          "hint: the file does not match its own config.json, or is of another model"]),
        ("untied_head_tied_deck", [generate("ix6.in", hf_dir("x6", lambda h: h.__setitem__("lm_head.weight", {
            "dtype": "F32", "shape": [269, 16], "data_offsets": [len(body), len(body) + 269 * 64]}), data=body + b"\x01" * (269 * 64)))], 1,
         ["x6/model.safetensors: tensor lm_head.weight differs from the token embedding, but the deck ties them",
          "hint: set &model tie_embeddings = .false. (and tie_word_embeddings false in config.json)"]),
        ("export_unwritable", [deck("ix12.in", f"&run task='export' out_dir='/proc/nope' /\n{MODEL[:-2]} init_from='{fx}/run/final' /\n")], 1,
         ["/proc/nope/hf: cannot create directory: No such file or directory"]),
        # out_dir/hf a symlink to a directory nobody may create files in (sysfs refuses root too)
        ("export_unwritable_dir", [deck("ix13.in", f"&run task='export' out_dir='{symlinked_hf('x13', '/sys/kernel')}' /\n"
                                        f"{MODEL[:-2]} init_from='{fx}/run/final' /\n")], 1,
         [re.compile(r"x13/hf/model\.safetensors\.tmp\.[0-9]+: cannot create: (Permission denied|Read-only file system)"),
          "hint: does the directory exist and is it writable?"]),
        ("config_missing", [generate("c14.in", os.path.join(tmp, "nodir"))], 1,
         ["nodir/config.json: cannot open: No such file or directory",
          "hint: a Hugging Face model directory has config.json and model.safetensors"]),
        ("config_not_a_file", [generate("c15.in", os.path.join(tmp, "cfg_is_dir"))], 1,
         ["cfg_is_dir/config.json: not a config.json (not a regular file, or over 16 MiB)"]),
        ("config_size_range", [generate("c16.in", hf_dir("c16", config=config_set("hidden_size", 4 * 10**18)))], 2,
         ["c16/config.json: \"hidden_size\" = 4000000000000000000: must be in [1, 2147483647]", HINT_CFG]),
        ("config_heads_range", [generate("c17.in", hf_dir("c17", config=config_set("num_attention_heads", -2**63)))], 2,
         ["c17/config.json: \"num_attention_heads\" = -9223372036854775808: must be in [1, 65536]"]),
        ("config_gpt2_range", [gpt2], 2, ["c18/config.json: \"n_embd\" = 4000000000000000000: must be in [1, 2147483647]"]),
        ("st_fifo", [generate("s26.in", os.path.join(tmp, "fifo_st"))], 1, ["fifo_st/model.safetensors: not a regular file"]),
        ("index_fifo", [generate("ix7.in", os.path.join(tmp, "fifo_ix"))], 1,
         ["fifo_ix/model.safetensors.index.json: not a regular file"]),
        ("index_dev_zero", [generate("ix8.in", os.path.join(tmp, "zero_ix"))], 1,
         ["zero_ix/model.safetensors.index.json: not a regular file"]),
        ("index_too_big", [generate("ix9.in", os.path.join(tmp, "big_ix"))], 1,
         ["big_ix/model.safetensors.index.json: over 16 MiB: not a shard index"]),
        ("export_config_fails", [deck("ix14.in", f"&run task='export' out_dir='{tmp}/x14' /\n{MODEL[:-2]} init_from='{fx}/run/final' /\n")], 1,
         [re.compile(r"x14/hf/config\.json: cannot rename .*x14/hf/config\.json\.tmp\.[0-9]+ over it: Is a directory")]),
    ]


def copy_store(name, manifest=None, shard=None, raw_manifest=None, with_shard=True):
    """A copy of the trained fixture's train store: its manifest changed by manifest(m) or replaced, its one
    shard's bytes changed by shard(b) or left out."""
    fx = trained()
    d = os.path.join(tmp, name)
    os.makedirs(d, exist_ok=True)
    m = json.load(open(os.path.join(fx, "store", "train.json")))
    if manifest:
        manifest(m)
    raw(os.path.join(name, "train.json"), raw_manifest if raw_manifest is not None else json.dumps(m))
    b = open(os.path.join(fx, "store", "train_00000.h5"), "rb").read()
    if with_shard:
        raw(os.path.join(name, "train_00000.h5"), shard(b) if shard else b)
    return os.path.join(d, "train.json")


def h5_edit(path, edit):
    """Edit an HDF5 file in place with h5py (python3-h5py: an HDF5 writer independent of fmhpc); returns path."""
    import h5py  # CI installs python3-h5py (.ci/setup); a missing import fails the group there
    with h5py.File(path, "r+") as f:
        edit(f)
    return path


def h5_replace(f, name, data):
    """Dataset `name` replaced by `data`, its attributes kept."""
    attrs = dict(f[name].attrs)
    del f[name]
    f[name] = data
    for k, v in attrs.items():
        f[name].attrs[k] = v


def h5_offset(path, dataset):
    """The file offset of a contiguous HDF5 dataset's data (h5dump, of hdf5-tools: the test's oracle)."""
    if not shutil.which("h5dump"):
        return None
    out = subprocess.run(["h5dump", "-p", "-H", "-d", dataset, path], capture_output=True, text=True).stdout
    m = re.search(r"OFFSET (\d+)", out)
    return int(m.group(1)) if m else None


def flip(offset):
    return lambda b: b[:offset] + bytes([b[offset] ^ 0xFF]) + b[offset + 1:]


def manifest_set(key, value):
    return lambda m: m.__setitem__(key, value)


def train(name, data, extra_data="", model=MODEL, train_keys="", extra="", out=None):
    return deck(name, f"&run task='train' out_dir='{out or os.path.join(tmp, 'train_' + name)}' /\n{model}"
                      f"&data train='{data}' {extra_data} /\n&train steps=3 global_batch=2 micro_batch=1 {train_keys} /\n"
                      f"&optim warmup_steps=0 /\n&log plot=.false. /\n{extra}")


def store_cases():
    """Stores (src/data/store*.c, sampler.c) and the training loop's checks of its data (src/train)."""
    fx = trained()
    tokens = h5_offset(os.path.join(fx, "store", "train_00000.h5"), "/tokens")
    tok2 = tok_json("tok2.json", lambda d: d["model"].__setitem__("merges", d["model"]["merges"][:-1]))
    run_ok([deck("prep2.in", f"&run task='prep' /\n&prep inputs='{fx}/corpus.jsonl' tokenizer='{tok2}' "
                             f"output='{tmp}/store2' seq_len=16 min_chars=1 valid_fraction=0.3 /\n")], "prep with tok2")
    # a store with no rows, as prep wrote one before it refused an empty train split (packing = 'bfd' dropping every
    # document): the fixture store's manifest with its shards taken out
    os.makedirs(os.path.join(tmp, "store_empty"), exist_ok=True)
    with open(os.path.join(fx, "store", "train.json")) as f:
        empty = json.load(f)
    empty.update(n_seq=0, documents=0, tokens=0, padding=0, padding_fraction=0.0, shards=[])
    with open(os.path.join(tmp, "store_empty", "train.json"), "w") as f:
        json.dump(empty, f)
    # prep stopped after its first window (as if killed), its window file then damaged, or rerun with another deck
    def stopped(name, edit=None, extra=b"", corpus=f"{fx}/corpus.jsonl"):
        out = os.path.join(tmp, name)
        d = deck(name + ".in", f"&run task='prep' /\n&prep inputs='{corpus}' tokenizer='{TOK}' output='{out}' "
                               "seq_len=16 min_chars=1 window_docs=8 /\n")
        run_ok([d, "prep%stop_after_windows=1"], "prep stopped after a window", 1)  # stops as if killed
        win = os.path.join(out, ".prep_work", "win_000000000.bin")
        if edit:  # a size, or (negative) that many bytes off the end: inside the token ids whatever their width
            size = os.path.getsize(win)
            os.truncate(win, edit if edit > 0 else size + edit)
            if os.path.getsize(win) >= size:
                raise SystemExit("produce.py: %s (%d bytes) was not cut by %d" % (win, size, edit))
        if extra:  # bytes after the window's end
            with open(win, "ab") as f:
                f.write(extra)
        return d, win
    other, _ = stopped("w_other")
    # an input edited in place after the windows were committed: same size, new content (it used to resume, mixing
    # windows of the old text into the new store)
    edited_corpus = os.path.join(tmp, "edited.jsonl")
    shutil.copyfile(os.path.join(fx, "corpus.jsonl"), edited_corpus)
    edited, _ = stopped("w_edited", corpus=edited_corpus)
    with open(edited_corpus, "r+b") as f:
        body = f.read()
        f.seek(0)
        f.write(body.replace(b"hello", b"jello"))
    st = os.stat(edited_corpus)
    os.utime(edited_corpus, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # a coarse clock still sees the edit
    if os.path.getsize(edited_corpus) != len(body):
        raise SystemExit("produce.py: the edit changed the size of " + edited_corpus)
    cut, cut_win = stopped("w_cut", -600)
    head, head_win = stopped("w_head", 64)
    long_, long_win = stopped("w_long", extra=b"extra")
    win_size = os.path.getsize(long_win) - 5  # what the header says: every window of this corpus and deck alike
    # a window of the right size whose segment table is damaged: row 0 of the train split said to hold R + 1 pieces
    # (its segment counts follow the header and the split's ids: tests/data/win_rewrite.py parses the layout)
    tab, tab_win = stopped("w_table")
    with open(tab_win, "rb") as f:
        form, whead, splits = win_rewrite.parse(f.read())
    R = 17  # the deck's seq_len + 1
    rows0 = len(splits[0][0]) // R
    with open(tab_win, "r+b") as f:
        f.seek(8 + len(whead) + len(splits[0][0]) * (2 if form == "v3w2" else 4))
        f.write(struct.pack("<i", R + 1))
    run_ok([deck("prep_bin.in", f"&run task='prep' /\n&prep inputs='{fx}/corpus.jsonl' tokenizer='{TOK}' output='{tmp}/store_bin' "
                                "seq_len=16 min_chars=1 format='bin' /\n")], "prep bin")
    bin_tokens = os.path.join(tmp, "store_bin", "train_00000.tokens.bin")
    os.truncate(bin_tokens, 1000)
    # a .bin store with one value planted in column 3 of row 5 (or of every row, -1) of a dataset, the manifest
    # re-signed as prep signs it (SHA-256 of the SHA-256s of 64 Ki-element pieces), so only the row checks see it
    run_ok([deck("prep_rows.in", f"&run task='prep' /\n&prep inputs='{fx}/corpus.jsonl' tokenizer='{TOK}' output='{tmp}/store_rows' "
                                 "seq_len=16 min_chars=1 format='bin' position_ids='doc_reset' /\n")], "prep bin with positions")

    def planted(name, dataset, row, value):
        d = os.path.join(tmp, name)
        shutil.copytree(os.path.join(tmp, "store_rows"), d)
        m = json.load(open(os.path.join(d, "train.json")))
        R, es = m["seq_len"] + 1, 4
        f = os.path.join(d, m["shards"][0]["file"] + "." + dataset + ".bin")
        b = bytearray(open(f, "rb").read())
        for i in [row * R + 3] if row >= 0 else [r * R + 3 for r in range(m["n_seq"])]:
            b[i * es:(i + 1) * es] = value.to_bytes(es, "little", signed=True)
        open(f, "wb").write(b)
        for sh in m["shards"]:
            for ds, e in (("tokens", 4), ("loss_mask", 1), ("segment_ids", 4), ("position_ids", 4)):
                data = open(os.path.join(d, sh["file"] + "." + ds + ".bin"), "rb").read()
                piece = 65536 * e
                sh["sha256"][ds] = hashlib.sha256(b"".join(hashlib.sha256(data[i:i + piece]).digest()
                                                           for i in range(0, len(data), piece))).hexdigest()
        raw(os.path.join(name, "train.json"), json.dumps(m))
        return os.path.join(d, "train.json")
    rows_token, rows_seg, rows_pos = planted("rows_token", "tokens", 5, 1000), planted("rows_seg", "segment_ids", 5, 9), \
        planted("rows_pos", "position_ids", 5, -4)
    every_token = planted("every_token", "tokens", -1, 1000)
    rx = tok_json("regex.json", lambda d: d.__setitem__("pre_tokenizer", {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "(ab"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]}))
    hint_rows = "hint: run task='prep' again for this store, or restore the shard from a copy"
    cases = [
        ("verify_token_id", ["--verify", rows_token], 1,
         ["rows_token/train_00000: row 5 (sample 5), column 3: token id 1000 >= vocab_size 269: the shard is corrupt or not "
          "written by fmhpc's prep", hint_rows]),
        ("verify_segment_id", ["--verify", rows_seg], 1,
         ["rows_seg/train_00000: row 5 (sample 5), column 3: segment id 9 after 1: a row numbers its documents 1, 2, ... "
          "from column 0, then padding 0: the shard is corrupt or not written by fmhpc's prep"]),
        ("verify_position_id", ["--verify", rows_pos], 1,
         ["rows_pos/train_00000: row 5 (sample 5), column 3: position id -4 at column 3: positions are 0 .. the column "
          "(the model's embedding has seq_len rows): the shard is corrupt or not written by fmhpc's prep"]),
        # training reads the batch: the message, and every rank stops (it was an abort through FM_CHECK, with
        # 'unrecoverable error' and Open MPI's abort banner after the message)
        ("train_token_id", [train("t23.in", every_token, train_keys="")], 1,
         [re.compile(r"every_token/train_00000: row [0-9]+ \(sample [0-9]+\), column 3: token id 1000 >= vocab_size 269: "
                     r"the shard is corrupt or not written by fmhpc's prep"),
          "hint: run task='prep' again for this store, or restore the shard from a copy (fmhpc --verify checks every "
          "row)"]),
        ("prep_resume_edited_input", [edited], 1,
         [os.path.join(tmp, "w_edited", ".prep_work", "fingerprint") + ": committed windows of a different prep (deck, "
          "tokenizer, inputs or window file version changed)"]),
        ("prep_resume_other_deck", [other, "prep%min_chars=2"], 1,
         [os.path.join(tmp, "w_other", ".prep_work", "fingerprint") + ": committed windows of a different prep (deck, "
          "tokenizer, inputs or window file version changed)", "hint: delete " + os.path.join(tmp, "w_other", ".prep_work") +
          " to start over, or run with the deck that made them"]),
        # a window file cut short, or with bytes after its end: refused by its size against its header (the read-time
        # 'the file ends before them' is left for a window changed between that check and its reads)
        ("prep_window_cut", [cut], 1,
         [cut_win + ": %d bytes, its header says %d bytes (cut short, or its header damaged)" % (win_size - 600, win_size),
          "hint: delete " + os.path.join(tmp, "w_cut", ".prep_work")]),
        ("prep_window_table", [tab], 1,
         [tab_win + ": cannot read rows 0..%d (the segment table is damaged)" % rows0,
          "hint: delete " + os.path.join(tmp, "w_table", ".prep_work")]),
        ("prep_window_long", [long_], 1,
         [long_win + ": %d bytes, its header says %d bytes (bytes after its end)" % (win_size + 5, win_size),
          "hint: delete " + os.path.join(tmp, "w_long", ".prep_work")]),
        ("prep_window_header", [head], 1,
         [head_win + ": missing or not a window file of this prep", "hint: delete " + os.path.join(tmp, "w_head", ".prep_work")]),
        ("bin_shard_cut", [train("t22.in", os.path.join(tmp, "store_bin", "train.json"))], 1,
         [bin_tokens + ": 1000 bytes, the manifest says 136 rows of 17 x 4 bytes = 9248"]),
        ("tokenizer_regex", ["--encode", rx], 1,
         [rx + ": pre-tokenizer regex does not compile at offset 3: missing closing parenthesis", "  pattern: (ab"]),
        ("manifest_missing", [train("t1.in", os.path.join(tmp, "nostore", "train.json"))], 1,
         ["nostore/train.json: cannot read the store manifest", "hint: run task='prep' first, or check &data train"]),
        ("manifest_json", [train("t2.in", copy_store("st2", raw_manifest="{\"a\": 01}"))], 1,
         ["st2/train.json:1:7: leading zero in number"]),
        ("manifest_keys", [train("t3.in", copy_store("st3", lambda m: m.pop("seq_len")))], 1,
         ["st3/train.json: not an fmhpc manifest (format 'fmhpc-packed', storage, seq_len, n_seq, vocab_size, eos_id, "
          "pad_id, packing, position_ids, tokenizer_hash, shards expected)"]),
        ("manifest_format", [train("t4.in", copy_store("st4"), "format='bin'")], 1,
         ["st4/train.json: the manifest describes 'h5' shards but &data format = 'bin'", "hint: use format='auto'"]),
        ("manifest_shard_entry", [train("t5.in", copy_store("st5", lambda m: m["shards"][0].pop("file")))], 1,
         ["st5/train.json: shards[0]: needs file, first_seq = 0 and n_seq in [0, 99]"]),
        ("manifest_range", [train("t6.in", copy_store("st6", manifest_set("eos_id", 5000)))], 1,
         ["st6/train.json: eos_id = 5000 is out of range (seq_len in [1, 2^30], n_seq >= 0, vocab_size in [1, 2^31], "
          "eos_id and pad_id in [0, vocab_size)): the store is damaged or not from fmhpc prep", "hint: run task='prep' again"]),
        ("shard_missing", [train("t9.in", copy_store("st9", with_shard=False))], 1,
         ["st9/train_00000.h5: cannot read the HDF5 shard: No such file or directory"]),
        ("shard_not_hdf5", [train("t10.in", copy_store("st10", shard=lambda b: b"garbage" * 100))], 1,
         ["st10/train_00000.h5: not an HDF5 file"]),
        ("shard_rows", [train("t11.in", copy_store("st11", lambda m: (m.__setitem__("n_seq", 98), m["shards"][0].__setitem__("n_seq", 98))))], 1,
         [re.compile(re.escape("st11/train_00000.h5: does not match the manifest " + os.path.join(tmp, "st11", "train.json") +
                               ": the shard has ") + r"[0-9]+ rows, the manifest says 98"),
          "hint: the manifest or the shard was edited or replaced; run task='prep' again for this store"]),
        # every attribute the shard repeats is compared (vocab_size, eos_id, packing edited in the manifest passed)
        ("shard_vocab_differs", [train("t11b.in", copy_store("st11b", manifest_set("vocab_size", 5000)))], 1,
         ["st11b/train_00000.h5: does not match the manifest " + os.path.join(tmp, "st11b", "train.json") +
          ": the shard has vocab_size 269, the manifest says 5000"]),
        ("shard_eos_differs", [train("t11c.in", copy_store("st11c", manifest_set("eos_id", 7)))], 1,
         ["st11c/train_00000.h5: does not match the manifest " + os.path.join(tmp, "st11c", "train.json") +
          ": the shard has eos_id 268 and pad_id 0, the manifest says 7 and 0"]),
        ("shard_packing_differs", [train("t11d.in", copy_store("st11d", manifest_set("packing", "bfd")))], 1,
         ["st11d/train_00000.h5: does not match the manifest " + os.path.join(tmp, "st11d", "train.json") +
          ": the shard has packing 'simple' and position ids "]),
        ("shard_seq_len_differs", [train("t11e.in", copy_store("st11e", manifest_set("seq_len", 8)))], 1,
         ["st11e/train_00000.h5: does not match the manifest " + os.path.join(tmp, "st11e", "train.json") +
          ": the shard has seq_len 16, the manifest says 8"]),
        ("shard_tokenizer_differs", [train("t11f.in", copy_store("st11f", manifest_set("tokenizer_hash", "0" * 64)))], 1,
         ["st11f/train_00000.h5: does not match the manifest " + os.path.join(tmp, "st11f", "train.json") +
          ": the shard has another tokenizer (hash "]),
        ("bin_shard_missing", [train("t17.in", copy_store("st17", manifest_set("storage", "bin")))], 1,
         ["st17/train_00000.h5.tokens.bin: cannot open: No such file or directory",
          "hint: the manifest lists it; was the prep output moved?"]),
        # a manifest without SHA-256 sums trains, and says its shards are not checked (it said nothing)
        ("store_without_sums", [train("t18.in", copy_store("st18", lambda m: [x.pop("sha256") for x in m["shards"]]))], 0,
         ["data: " + os.path.join(tmp, "st18", "train.json") + ": 1 of its 1 shard has no SHA-256 sums in the manifest "
          "(a store prepped before checksums, or an edited manifest): that one is not checked",
          "hint: run task='prep' again to write them; fmhpc --verify "]),
        ("store_without_samples", [train("t15.in", os.path.join(tmp, "store_empty", "train.json"))], 2,
         ["sampler: the training store holds no samples", "hint: check &data train and the prep report"]),
        ("valid_of_another_tokenizer", [train("t16.in", os.path.join(fx, "store", "train.json"),
                                               f"valid='{tmp}/store2/valid.json'")], 2,
         ["&data valid = '" + os.path.join(tmp, "store2", "valid.json") + "': was made by another tokenizer than &data train = '",
          "hint: prep train and valid with the same &prep tokenizer"]),
        ("nccl_on_cpu", [train("t21.in", os.path.join(fx, "store", "train.json"), extra="&parallel comm='nccl' /\n")], 2,
         ["&parallel comm = 'nccl': NCCL collectives need the CUDA backend; training runs on the CPU backend here, whose "
          "buffers MPI reduces"]),
        ("out_dir_unwritable", [train("t19.in", os.path.join(fx, "store", "train.json"), out="/proc/nope")], 1,
         ["fmhpc: &run out_dir = '/proc/nope': cannot create or write the directory: No such file or directory",
          "hint: point &run out_dir at a writable directory (run%out_dir='runs/x' on the command line)"]),
        # A diverging run (lr 1e30): from step 2 the weights give non-finite attention scores; the steps are
        # skipped and counted, and the run stops (it once aborted in the attention kernel's "sees no key").
        ("divergence_stops", [deck("t20.in", f"&run task='train' out_dir='{tmp}/t20' /\n{MODEL}&data train='{fx}/store/train.json' /\n"
                                             "&train steps=8 global_batch=2 micro_batch=1 max_bad_steps=2 /\n&optim warmup_steps=0 lr=1e30 /\n"
                                             "&log plot=.false. /\n")], 1,
         ["step 2: non-finite loss, first in the gradient of wte (element 0): step skipped (1 in a row, &train max_bad_steps = 2)",
          "fmhpc: step 3: 2 steps in a row with a non-finite loss or gradient (first non-finite: the gradient of wte (element 0)): "
          "stopping; the weights and checkpoints hold no step with NaN/Inf",
          "hint: lower &optim lr, check the data, or raise &train max_bad_steps"]),
    ]
    def h5store(name, edit):
        m = copy_store(name)
        h5_edit(os.path.join(tmp, name, "train_00000.h5"), edit)
        return m

    cases += [
        ("shard_not_fmhpc", [train("t30.in", h5store("st30", lambda f: f.attrs.__delitem__("format")))], 1,
         ["st30/train_00000.h5: not an fmhpc packed shard (attributes format='fmhpc-packed', seq_len, vocab_size, "
          "eos_id, pad_id, packing, position_ids, tokenizer_hash expected)"]),
        ("shard_dataset_missing", [train("t31.in", h5store("st31", lambda f: f.__delitem__("loss_mask")))], 1,
         ["st31/train_00000.h5: dataset /loss_mask missing or not (n_seq, 17)"]),
        ("shard_rows_differ", [train("t32.in", h5store("st32", lambda f: h5_replace(f, "segment_ids", f["segment_ids"][:-1])))], 1,
         [re.compile(r"st32/train_00000\.h5: /segment_ids has [0-9]+ rows, /tokens [0-9]+")]),
    ]
    if tokens is not None:
        cases.append(("shard_sha256", [train("t8.in", copy_store("st8", shard=flip(tokens + 100)))], 1,
                      ["st8/train.json: shard 'train_00000.h5': dataset 'tokens' does not match its SHA-256 in the manifest: "
                       "the shard was changed or damaged after prep",
                       "hint: run task='prep' again, or restore the shard from a copy"]))
    elif os.environ.get("CI") == "true":
        cases.append(("h5dump_missing", ["--version"], 1, ["h5dump (hdf5-tools) is the oracle of the SHA-256 cases"]))
    else:
        print("SKIP shard_sha256: h5dump (hdf5-tools) is missing")
    return cases


def ckpt_cases():
    """Checkpoints given to &ckpt resume, 'auto' over a directory, a used directory (src/ckpt, src/train/compat.c)."""
    fx = trained()
    step2 = os.path.join(fx, "run", "ckpt", "step_00000002.h5")
    data = os.path.join(fx, "store", "train.json")

    def ckpt(name, edit=None):
        b = open(step2, "rb").read()
        return raw(name, edit(b) if edit else b)

    def resume(name, path, model=MODEL, train_keys="", optim="", out=None):
        return train(name, data, model=model + optim, train_keys=train_keys, out=out,
                     extra=f"&ckpt resume='{path}' every=1 /\n")

    def run_copy(name):
        d = os.path.join(tmp, name)
        shutil.copytree(os.path.join(fx, "run"), d)
        return d

    used, broken, cut = run_copy("used"), run_copy("broken"), run_copy("cut")
    # the newest checkpoint cut short after its commit (a crash, a full disk): its run id is unreadable, and the
    # resume used to look only for older files without one, so it failed instead of falling back to step 1
    os.truncate(os.path.join(cut, "ckpt", "step_00000002.h5"), 4096)
    for f in os.listdir(os.path.join(broken, "ckpt")):
        if f.startswith("step_"):
            with open(os.path.join(broken, "ckpt", f), "wb") as g:
                g.write(b"junk")
    hint = "hint: resume = 'auto' takes the newest valid one in "
    params, moments = h5_offset(step2, "/params/wte"), h5_offset(step2, "/optim/m/wte")
    cases = [
        ("resume_truncated", [resume("ck1.in", ckpt("k1.h5", lambda b: b[:100]))], 1,
         ["k1.h5: cannot open as HDF5 (missing, truncated or corrupt)", hint]),
        ("resume_not_a_checkpoint", [resume("ck2.in", os.path.join(fx, "store", "train_00000.h5"))], 1,
         ["train_00000.h5: not an fmhpc checkpoint or its run-state attributes are unreadable"]),
        ("resume_other_model", [resume("ck3.in", ckpt("k3.h5"), MODEL.replace("d_ff=32", "d_ff=64"))], 1,
         ["k3.h5: holds 6656 parameters, the model has 8192: the checkpoint is from a different model"]),
        ("resume_other_optimizer", [resume("ck4.in", ckpt("k4.h5"), optim="&optim name='lion' /\n")], 1,
         ["k4.h5: optimizer 'adamw', the deck says 'lion'"]),
        ("resume_spike_window", [resume("ck5.in", ckpt("k5.h5"), train_keys="spike_window=50")], 1,
         ["k5.h5: loss-spike window 100, the deck says 50 (&train spike_window)"]),
        ("resume_model_keys", [resume("ck20.in", ckpt("k20.h5"), MODEL.replace("seq_len=16", "seq_len=16 norm_eps=1e-6"))], 2,
         ["fmhpc: resume: " + os.path.join(tmp, "k20.h5") + " was trained with another model or optimizer:",
          "  &model norm_eps = 1e-5 in the checkpoint, 1e-6 in this deck",
          "hint: these keys change what the stored weights mean; resume with the checkpoint's values, or start a new run "
          "(&ckpt resume = 'none', or another out_dir) and &model init_from its exported weights"]),
        # head_dim written out as its default (d_model / n_head): the same model, so a change recorded, not a refusal
        # (resume compared the keys' values while loading a checkpoint compared the resolved dims)
        ("resume_same_model_keys_written", [resume("ck21.in", ckpt("k21.h5"), MODEL.replace("n_head=2", "n_head=2 head_dim=8"))],
         0, [re.compile(r"resume: \d key\(s\) differ from " + re.escape(os.path.join(tmp, "k21.h5")) + r" \(allowed"),
             "&model head_dim = 0 in the checkpoint, 8 now"]),
        ("resume_allowed_keys", [resume("ck8.in", ckpt("k8.h5"), train_keys="grad_clip=0.5")], 0,
         ["resume: 3 key(s) differ from " + os.path.join(tmp, "k8.h5") + " (allowed; recorded in metrics.jsonl):",
          "&train grad_clip = 1.0 in the checkpoint, 0.5 now"]),
        # the used directory's step_00000001.h5 is another run's: this run's first checkpoint fails rather than
        # replace it (a hostile test lost every checkpoint of a run this way)
        ("fresh_start_in_used_dir", [resume("ck10.in", "none", out=used)], 1,
         ["resume = 'none': " + os.path.join(used, "ckpt") + " already holds 2 checkpoints (newest step_00000002.h5); "
          "this run starts at step 0 with a new run id: retention and resume = 'auto' consider only its own checkpoints, "
          "its first one moves `latest`, and a checkpoint of a step whose file another run holds fails rather than replace it",
          re.compile(r"fmhpc: checkpoint of step 1 failed: " + re.escape(os.path.join(used, "ckpt", "step_00000001.h5")) +
                     r" belongs to another run \(run id [0-9a-f]+; this run's is [0-9a-f]+\): a checkpoint never replaces "
                     r"another run's file \(write this run's checkpoints elsewhere: &ckpt dir or &run out_dir; or move that run's files\)")]),
        ("auto_none_valid", [resume("ck11.in", "auto", out=broken)], 1,
         ["resume: skipping " + os.path.join(broken, "ckpt", "step_00000002.h5") + ": ",
          "fmhpc: &ckpt resume = 'auto': none of the 2 checkpoints in " + os.path.join(broken, "ckpt") + " is valid (see above)",
          "hint: resume = 'none' starts over; resume = 'PATH' names one file"]),
        ("auto_newest_cut", [resume("ck19.in", "auto", out=cut, train_keys="steps=3")], 0,
         [re.compile(re.escape("resume: " + os.path.join(cut, "ckpt", "step_00000002.h5") + " has no readable run id (cut "
                               "short or damaged); its run is taken to be that of " +
                               os.path.join(cut, "ckpt", "step_00000001.h5")) + r" \(run id [0-9a-f]+\)"),
          "resume: skipping " + os.path.join(cut, "ckpt", "step_00000002.h5") + ": " +
          os.path.join(cut, "ckpt", "step_00000002.h5") + ": cannot open as HDF5 (missing, truncated or corrupt)",
          "resume: " + os.path.join(cut, "ckpt", "step_00000001.h5") + ", step 1 ("]),
        ("eval_model_not_a_checkpoint", [deck("ck12.in", f"&run task='eval' out_dir='{tmp}/k12' /\n{MODEL}&data valid='{fx}/store/valid.json' /\n"
                                                        f"&eval model='{fx}/store/train_00000.h5' batches=1 /\n&train micro_batch=1 /\n")], 1,
         ["train_00000.h5: not an fmhpc checkpoint (no format = 'fmhpc-ckpt' attribute)",
          "hint: a model is an fmhpc checkpoint (step_N.h5) or an HF directory"]),
    ]
    # a finished run run again (a requeue, a rerun script): nothing to train, and the finished run's summary,
    # final/ and metrics stay as they were (a rerun once replaced summary.json with one of 0 steps and no loss)
    done = run_copy("done")
    before = {f: open(os.path.join(done, f), "rb").read()
              for f in ("summary.json", "metrics.jsonl", os.path.join("final", "model.safetensors"))}
    done_deck = deck("ck13.in", f"&run task='train' out_dir='{done}' /\n{MODEL}&data train='{data}' "
                                f"valid='{fx}/store/valid.json' /\n&train steps=2 global_batch=2 micro_batch=1 /\n"
                                "&optim warmup_steps=0 /\n&ckpt every=1 resume='auto' /\n&log plot=.false. /\n")
    cases.append(("resume_nothing_to_train", [done_deck], 0,
                  ["resume: " + os.path.join(done, "ckpt", "step_00000002.h5") + " is at step 2, &train steps = 2: "
                   "nothing to train; " + done + "/summary.json, final/ and metrics.jsonl stay as the run that reached "
                   "step 2 wrote them (raise &train steps to train further)"]))
    AFTER.append(("resume_nothing_to_train",
                  lambda: next((f + " changed" for f, b in before.items()
                                if open(os.path.join(done, f), "rb").read() != b), None)))
    # the last step's checkpoint fails (its file, step_00000003.h5, is another run's, which a checkpoint never
    # replaces; every=3 of 3 steps: the only one): exit status 1 as for a checkpoint that fails mid-run, and the
    # trained weights still reach final/ and summary.json (they were once dropped with the checkpoint)
    lost = os.path.join(tmp, "train_ck14.in")
    os.makedirs(os.path.join(tmp, "other_ckpt"), exist_ok=True)
    other3 = os.path.join(tmp, "other_ckpt", "step_00000003.h5")
    shutil.copyfile(step2, other3)
    cases.append(("final_checkpoint_failed",
                  [train("ck14.in", data, extra=f"&ckpt dir='{tmp}/other_ckpt' every=3 /\n")], 1,
                  [re.compile(re.escape(f"fmhpc: checkpoint of step 3 failed: {other3} belongs to another run (run id ")),
                   f"fmhpc: the checkpoint of the last step (3) failed (above): the run's weights are in {lost}/final "
                   f"and summary.json (\"final_checkpoint\": \"failed\"), not in {tmp}/other_ckpt; exit status 1",
                   f"hint: free space in {tmp}/other_ckpt or make it writable, then run the deck again: "
                   "resume = 'auto' continues from the newest checkpoint there and reaches the same weights"]))
    # a &ckpt dir that cannot be made (under a regular file): refused at the start, not at the first checkpoint
    raw("not_a_dir", b"")
    cases.append(("ckpt_dir_not_writable",
                  [train("ck15.in", data, extra=f"&ckpt dir='{tmp}/not_a_dir/ckpt' every=100 /\n")], 1,
                  [f"fmhpc: &ckpt dir = '{tmp}/not_a_dir/ckpt': cannot create or write the directory: Not a directory",
                   "hint: point &ckpt dir at a writable directory; the run would fail at its first checkpoint"]))

    def final_check():
        if not os.path.isfile(os.path.join(lost, "final", "model.safetensors")):
            return "no final/model.safetensors"
        s = json.load(open(os.path.join(lost, "summary.json")))
        if s.get("final_checkpoint") != "failed" or s.get("steps") != 3 or not s.get("final_loss") > 0:
            return f"summary.json does not record 3 steps, a loss and the failed checkpoint: {s}"
        return None
    AFTER.append(("final_checkpoint_failed", final_check))

    def h5ckpt(name, edit):
        dst = os.path.join(tmp, name)
        shutil.copyfile(step2, dst)
        return h5_edit(dst, edit)

    def deck_attr(f, text):
        f.attrs.modify("deck", text)  # keeps the attribute's type (fmhpc writes an ASCII variable-length string)

    def deck_new(f, text, fixed=False):
        del f.attrs["deck"]
        if fixed:
            import numpy
            f.attrs["deck"] = numpy.bytes_(text)
        else:
            f.attrs["deck"] = text

    stored = None
    try:
        import h5py
        with h5py.File(step2, "r") as f:
            stored = f.attrs["deck"]
        stored = stored.decode() if isinstance(stored, bytes) else str(stored)
    except ImportError:
        if os.environ.get("CI") == "true":
            raise
    if stored is not None:
        cases += [
            ("resume_dataset_shape", [resume("ck30.in", h5ckpt("k30.h5", lambda f: h5_replace(f, "params/wte", f["params/wte"][()].reshape(-1))))], 1,
             [re.compile(r"k30\.h5: dataset /?params/wte does not have the model's shape \([0-9]+ elements in 2 dims expected\): "
                         r"the checkpoint is from a different model or deck")]),
            ("resume_dataset_no_sha256", [resume("ck31.in", h5ckpt("k31.h5", lambda f: f["params/wte"].attrs.__delitem__("sha256")))], 1,
             [re.compile(r"k31\.h5: dataset /?params/wte has no sha256 attribute")]),
            ("resume_no_deck", [resume("ck32.in", h5ckpt("k32.h5", lambda f: f.attrs.__delitem__("deck")))], 0,
             ["resume: " + os.path.join(tmp, "k32.h5") + " stores no deck: model and optimizer keys cannot be compared"]),
            ("resume_deck_unknown_keys", [resume("ck33.in", h5ckpt("k33.h5", lambda f: deck_attr(f, stored + "\n&model future_key = 1 /\n")))], 0,
             ["resume: the deck stored in " + os.path.join(tmp, "k33.h5") + " has keys this version does not know: the others are compared"]),
            # other writers' string forms are read, not taken for "no deck": h5py's str (variable-length UTF-8)
            # and numpy bytes (fixed-length ASCII)
            ("resume_deck_utf8", [resume("ck34.in", h5ckpt("k34.h5", lambda f: deck_new(f, stored + "\n&model future_key = 1 /\n")))], 0,
             ["resume: the deck stored in " + os.path.join(tmp, "k34.h5") + " has keys this version does not know: the others are compared"]),
            ("resume_deck_fixed", [resume("ck35.in", h5ckpt("k35.h5", lambda f: deck_new(f, (stored + "\n&model future_key = 1 /\n").encode(), fixed=True)))], 0,
             ["resume: the deck stored in " + os.path.join(tmp, "k35.h5") + " has keys this version does not know: the others are compared"]),
            # the run-state counters are range-checked (the checksums cover datasets, not attributes): a spike_head
            # past the window wrote out of bounds, a negative sample count hung the sampler, a negative step
            # failed with no message
            ("resume_spike_head", [resume("ck36.in", h5ckpt("k36.h5", lambda f: f.attrs.modify("spike_head", 1000000)))], 1,
             [re.compile(r"k36\.h5: run-state attribute spike_head = 1000000 is outside \[0, [0-9]+\]: the file is damaged "
                         r"or was edited \(its checksums cover the datasets, not these attributes\)")]),
            ("resume_samples_negative", [resume("ck37.in", h5ckpt("k37.h5", lambda f: f.attrs.modify("samples", -1000000)))], 1,
             [re.compile(r"k37\.h5: run-state attribute samples = -1000000 is outside \[0, 4611686018427387904\]")]),
            ("resume_step_negative", [resume("ck38.in", h5ckpt("k38.h5", lambda f: f.attrs.modify("step", -3)))], 1,
             [re.compile(r"k38\.h5: run-state attribute step = -3 is outside \[0, 4611686018427387904\]")]),
        ]
    else:
        print("SKIP resume_dataset_*, resume_*deck*: h5py is missing")
    if params is not None and moments is not None:
        cases += [
            ("resume_params_sha256", [resume("ck6.in", ckpt("k6.h5", flip(params + 10)))], 1,
             [re.compile(r"k6\.h5: dataset params/wte: SHA-256 mismatch \(stored [0-9a-f]{16}\.\.\., computed [0-9a-f]{16}\.\.\.\): the file is corrupt")]),
            ("resume_moments_sha256", [resume("ck7.in", ckpt("k7.h5", flip(moments + 10)))], 1,
             [re.compile(r"k7\.h5: dataset optim/m/wte: SHA-256 mismatch \(stored [0-9a-f]{16}\.\.\., computed [0-9a-f]{16}\.\.\.\): the file is corrupt")]),
        ]
    elif os.environ.get("CI") == "true":
        cases.append(("h5dump_missing", ["--version"], 1, ["h5dump (hdf5-tools) is the oracle of the SHA-256 cases"]))
    else:
        print("SKIP resume_*_sha256: h5dump (hdf5-tools) is missing")
    return cases


def metrics(name, text):
    d = os.path.join(tmp, name)
    os.makedirs(d, exist_ok=True)
    raw(os.path.join(name, "metrics.jsonl"), text)
    return d


def models_cases():
    """The tasks that read a model: eval, generate, ifd, export (src/eval, src/interop/hf.c), and --plot."""
    fx = trained()
    md, valid, tok = os.path.join(fx, "run", "final"), os.path.join(fx, "store", "valid.json"), TOK

    def ev(name, data="", eval_keys="", extra="", out=None):
        return deck(name, f"&run task='eval' out_dir='{out or os.path.join(tmp, 'ev_' + name)}' /\n{MODEL}&data {data} /\n"
                          f"&eval model='{md}' batches=2 {eval_keys} /\n&train micro_batch=1 /\n{extra}")

    def gen(name, keys, extra=""):
        return deck(name, f"&run task='generate' out_dir='{tmp}/gen_{name}' /\n{MODEL}&generate model='{md}' {keys} /\n{extra}")

    def ifd(name, keys):
        return deck(name, f"&run task='ifd' out_dir='{tmp}/ifd_{name}' /\n{MODEL}&ifd {keys} /\n")

    pr1 = jsonl("pr1.jsonl", ['{"prompt": 5}\n'])
    pr2 = jsonl("pr2.jsonl", ['{"prompt": "a"}\n', '{"prompt": x}\n'])
    i1 = jsonl("ifd1.jsonl", ['{"instruction": "a", "output": x}\n'])
    i2 = jsonl("ifd2.jsonl", ['{"instruction": "a"}\n'])
    i3 = jsonl("ifd3.jsonl", ['{"instruction": "what is it", "output": "a thing"}\n'])
    tok_big = tok_json("tok_big.json", vocab_set("zz", 280))  # 281 ids

    def same_as_final():  # the checkpoint of the last step, exported, is the run's own final/ export, byte for byte
        for f in ("config.json", "model.safetensors"):
            a, b = os.path.join(tmp, "x2", "hf", f), os.path.join(md, f)
            if not os.path.exists(a) or open(a, "rb").read() != open(b, "rb").read():
                return f"{a} is not {b}"
        return None
    AFTER.append(("export_from_checkpoint", same_as_final))
    return [
        ("eval_no_store", [ev("e1.in")], 2, ["&data valid = '': task = 'eval' needs a store (&data valid or train)"]),
        # refused before the passes (it failed after all the work), with the reason
        ("eval_per_doc_unwritable", [ev("e2.in", f"valid='{valid}'", "per_doc='/proc/nope/x.jsonl'")], 1,
         ["fmhpc: cannot write &eval per_doc = '/proc/nope/x.jsonl': No such file or directory",
          "hint: set per_doc = '' for no per-document results"]),
        # its directory is made, as eval.json's is (the default per_doc lies in an out_dir made only later)
        ("eval_per_doc_new_dir", [ev("e6n.in", f"valid='{valid}'", f"per_doc='{tmp}/e6new/sub/docs.jsonl'")], 0,
         ["eval: per-document results in " + tmp + "/e6new/sub/docs.jsonl"]),
        ("eval_results_unwritable", [ev("e4.in", f"valid='{valid}'", out="/proc/nope")], 1, ["fmhpc: cannot write /proc/nope/eval.json"]),
        ("eval_backend", [ev("e3.in", f"valid='{valid}'", extra="&train backend='cuda' /\n")], 2,
         ["&train backend = 'cuda': eval cannot use this backend: backend 'cuda': "]),
        ("generate_no_tokenizer", [gen("g1.in", "prompts='a'")], 2,
         ["&generate tokenizer = '': task = 'generate' needs a tokenizer: tokenizer.json, a tiktoken file, or a GPT-2 "
          "directory (encoder.json + vocab.bpe)"]),
        ("generate_no_prompts", [gen("g2.in", f"tokenizer='{tok}'")], 2,
         ["&generate prompts = : no prompts: give &generate prompts or prompts_file"]),
        ("generate_prompt_not_string", [gen("g4.in", f"tokenizer='{tok}' prompts_file='{pr1}'")], 1,
         ["error: " + pr1 + ":1: each line must be an object with a string \"prompt\""]),
        ("generate_prompts_json", [gen("g5.in", f"tokenizer='{tok}' prompts_file='{pr2}'")], 1, ["error: " + pr2 + ":2:12: bad number"]),
        ("generate_prompt_too_long", [gen("g7.in", f"tokenizer='{tok}' prompts='{'x y ' * 30}'")], 2,
         ["&model seq_len = 16: prompt 0 is 120 tokens: the context holds 16"]),
        ("generate_past_context", [gen("g8.in", f"tokenizer='{tok}' prompts='hello' max_tokens=40")], 0,
         ["fmhpc: warning: generate: prompt 0 (2 tokens) + max_tokens 40 passes &model seq_len = 16: its text stops at the "
          "context (stop 'context')"]),
        ("generate_output_unwritable", [gen("g9.in", f"tokenizer='{tok}' prompts='hello' max_tokens=2 output='/proc/nope/x'")], 1,
         ["fmhpc: cannot write /proc/nope/x"]),
        ("generate_backend", [gen("g10.in", f"tokenizer='{tok}' prompts='hello'", "&train backend='cuda' /\n")], 2,
         ["&train backend = 'cuda': generate cannot use this backend: backend 'cuda': "]),
        ("generate_tokenizer_too_big", [gen("g11.in", f"tokenizer='{tok_big}' prompts='a'")], 2,
         ["&model vocab_size = 269: the tokenizer has 281 ids, more than the model's 269"]),
        ("eval_checkpoint_of_other_model", [deck("e5.in", f"&run task='eval' out_dir='{tmp}/e5' /\n{MODEL.replace('d_ff=32', 'd_ff=64')}"
                                                          f"&data valid='{valid}' /\n&eval model='{fx}/run/ckpt/step_00000002.h5' batches=1 /\n"
                                                          "&train micro_batch=1 /\n")], 1,
         ["step_00000002.h5: holds 6656 parameters, the model of &model has 8192: set &model as the run that wrote it"]),
        ("train_store_vocab_too_big", [deck("e6.in", f"&run task='train' out_dir='{tmp}/e6' /\n{MODEL.replace('vocab_size=269', 'vocab_size=200')}"
                                                     f"&data train='{fx}/store/train.json' /\n&train steps=1 global_batch=2 micro_batch=1 /\n")], 2,
         ["&model vocab_size = 200: the store " + os.path.join(fx, "store", "train.json") + "'s tokenizer has 269 ids"]),
        ("eval_store_seq_len", [deck("e7.in", f"&run task='eval' out_dir='{tmp}/e7' /\n{MODEL.replace('seq_len=16', 'seq_len=8')}"
                                              f"&data valid='{valid}' /\n&eval model='{md}' batches=1 /\n&train micro_batch=1 /\n")], 2,
         ["&model seq_len = 8: the store " + valid + " holds sequences of 16 tokens",
          "hint: prep with &prep seq_len = 8, or set &model seq_len = 16"]),
        ("decode_not_an_id", ["--decode", tok], 1,
         ["fmhpc --decode: input byte 2: '99999 x' is not a token id of " + tok + " (0..268)"], b"5 99999 x"),
        ("encode_stdin_unreadable", ["--encode", tok], 1,
         ["fmhpc --encode: standard input: cannot read: Is a directory",
          "hint: give the text on stdin: a file (< file) or a pipe"], tmp),
        ("decode_stdin_unreadable", ["--decode", tok], 1, ["fmhpc --decode: standard input: cannot read: Is a directory"], tmp),
        # a full disk under stdout is a failure said, not a short result with exit 0
        ("encode_stdout_full", ["--encode", tok], 1, ["fmhpc --encode: standard output: cannot write: No space left on device"],
         b"hello", "/dev/full"),
        ("decode_stdout_full", ["--decode", tok], 1, ["fmhpc --decode: standard output: cannot write: No space left on device"],
         b"5 6", "/dev/full"),
        ("ifd_no_tokenizer", [ifd("i1.in", f"inputs='{i3}' model='{md}'")], 2,
         ["&ifd tokenizer = '': task = 'ifd' needs the model's tokenizer"]),
        ("ifd_no_model", [ifd("i2.in", f"inputs='{i3}' tokenizer='{tok}'")], 2,
         ["&ifd model = '': task = 'ifd' needs an HF directory (config.json + model.safetensors)"]),
        ("ifd_max_len", [ifd("i3.in", f"inputs='{i3}' model='{md}' tokenizer='{tok}' max_len=100")], 2,
         ["&ifd max_len = 100: max_len = 100: a form of n ids needs a row of n - 1 <= seq_len = 16",
          "hint: max_len = 0 means seq_len + 1"]),
        ("ifd_bad_json", [ifd("i4.in", f"inputs='{i1}' model='{md}' tokenizer='{tok}'")], 1, ["ifd1.jsonl:1:32: malformed JSON: bad number"]),
        ("ifd_fields", [ifd("i5.in", f"inputs='{i2}' model='{md}' tokenizer='{tok}'")], 1,
         ["ifd2.jsonl:1: record 0 needs string fields 'instruction' and 'output' (&ifd instruction_field, response_field)"]),
        ("ifd_output_unwritable", [ifd("i6.in", f"inputs='{i3}' model='{md}' tokenizer='{tok}' output='/proc/nope/x'")], 1,
         ["fmhpc: cannot write /proc/nope/x (&ifd output)"]),
        ("export_without_weights", [deck("x1.in", f"&run task='export' out_dir='{tmp}/x1' /\n{MODEL}")], 2,
         ["&model init_from = '': task 'export' needs weights to export: an fmhpc checkpoint (step_N.h5) or a Hugging "
          "Face model directory (config.json + model.safetensors)"]),
        # a checkpoint exported: it was refused ("checkpoints are not readable yet"); the final step's checkpoint
        # gives the bytes the run's own final/ export holds (checked below, AFTER)
        ("export_from_checkpoint", [deck("x2.in", f"&run task='export' out_dir='{tmp}/x2' /\n{MODEL[:-2]} "
                                                  f"init_from='{fx}/run/ckpt/step_00000002.h5' /\n")], 0,
         [f"export: wrote {tmp}/x2/hf/config.json and model.safetensors (", f"parameters, fp32) from {fx}/run/ckpt/step_00000002.h5"]),
        ("plot_bad_line", ["--plot", metrics("pl1", '{"step": 1}\nxx\n')], 1,
         ["fmhpc: " + os.path.join(tmp, "pl1", "metrics.jsonl") + ":2:1: bad number", "hint: each line must be one JSON record"]),
        ("plot_no_steps", ["--plot", metrics("pl2", '{"kind": "start"}\n')], 1,
         ["fmhpc: " + os.path.join(tmp, "pl2", "metrics.jsonl") + " holds no step records yet: nothing to plot"]),
        ("plot_no_run", ["--plot", os.path.join(tmp, "norun")], 1,
         ["fmhpc: cannot read '" + os.path.join(tmp, "norun", "metrics.jsonl") + "': No such file or directory",
          "hint: a run directory holds metrics.jsonl (&log metrics)"]),
    ]


GROUPS = {"cli": CLI, "deck": DECK, "tasks": TASKS, "tokenizer": TOKENIZER, "data": DATA,
          "interop": interop_cases, "store": store_cases,
          "ckpt": ckpt_cases, "models": models_cases}


def main():
    names = sys.argv[2:] or list(GROUPS)
    CASES = [c for g in names for c in (GROUPS[g]() if callable(GROUPS[g]) else GROUPS[g])]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    bad = 0
    for name, argv, status, texts, *extra in CASES:
        # stdin: bytes, or a directory (a descriptor whose reads fail), or none (empty);
        # then optionally a file to take stdout (e.g. /dev/full, where every write fails)
        stdin = extra[:1]
        fd = os.open(stdin[0], os.O_RDONLY) if stdin and isinstance(stdin[0], str) else None
        out_fd = os.open(extra[1], os.O_WRONLY) if len(extra) > 1 else None
        try:
            r = subprocess.run([FMHPC] + argv, stderr=subprocess.PIPE, timeout=120, env=env, cwd=tmp,
                               stdout=out_fd if out_fd is not None else subprocess.PIPE,
                               **({"stdin": fd} if fd is not None else {"input": stdin[0] if stdin else b""}))
            r.stdout, r.stderr = (x.decode(errors="replace") if x is not None else "" for x in (r.stdout, r.stderr))
        except subprocess.TimeoutExpired:
            r = None
        finally:
            for d in (fd, out_fd):
                if d is not None:
                    os.close(d)
        if r is None:
            print(f"FAIL {name}: still running after 120 s")
            bad += 1
            continue
        out = r.stdout + r.stderr
        missing = [t if isinstance(t, str) else t.pattern for t in texts
                   if (t not in out if isinstance(t, str) else not t.search(out))]
        if r.returncode != status or missing:
            bad += 1
            print(f"FAIL {name}: exit {r.returncode} (expected {status}); missing: {missing}")
            print("  output tail: " + "\n  ".join(out.strip().splitlines()[-6:]))
        else:
            print(f"ok   {name}: exit {status}, {len(texts)} message(s)")
    for name, check in AFTER:
        problem = check()
        if problem:
            bad += 1
            print(f"FAIL {name}: {problem}")
    print(f"{len(CASES) - bad} of {len(CASES)} cases produce their messages")
    shutil.rmtree(tmp, ignore_errors=True)
    return 1 if bad or not CASES else 0


if __name__ == "__main__":
    sys.exit(main())
