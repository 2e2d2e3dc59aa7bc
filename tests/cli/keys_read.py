#!/usr/bin/env python3
"""keys_read.py REPO: every key in src/deck/keys.def is read by code that acts on it.

A key the deck accepts and nothing reads is a lie to the user. FmConfig is a
struct generated from keys.def, so a key is read exactly where code names its
field: `.group.name` or `->group.name` (`name_n` for an array's count), or,
for a choice key, its bound enum value `choice[FM_KEY_group_name]`. This test reads
every C file under src/ except the deck module itself (which binds, prints and
compares every key generically) and the --check plan (src/train/plan.c, which
only describes a run: a key read there alone, like &parallel zero once was, is
not honoured), and fails listing each key no other code names.

PENDING names keys whose reader is being written in another branch of the same
issue; each is listed on every run so it cannot be forgotten, and an entry
whose key has become read is reported so it can go. PLAN_ONLY names keys
that only describe the machine to --check (their help must say "--check")."""
import pathlib
import re
import sys

PENDING = {}  # "group.key": "what will read it (issue, branch)"
# Keys that by their help text only describe the machine to --check's plan
# (they change no run); each with the reason it acts nowhere else.
PLAN_ONLY = {"parallel.device_mem_gib": "the device size --check tests the plan against (help text says so)"}
NOT_ACTING = {"src/train/plan.c"}

repo = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
keys_def = (repo / "src/deck/keys.def").read_text()
keys = re.findall(r"^FM_KEYA?\((\w+), (\w+),", keys_def, re.M)
assert len(keys) > 100, f"found only {len(keys)} keys in keys.def: the pattern is stale"

code = ""
nfiles = 0
for p in sorted((repo / "src").rglob("*")):
    rel = p.relative_to(repo).as_posix()
    if p.suffix not in (".c", ".h", ".cu") or rel.startswith("src/deck/") or rel in NOT_ACTING:
        continue
    code += p.read_text(errors="replace") + "\n"
    nfiles += 1
assert nfiles > 50, f"scanned only {nfiles} source files"

unread, pending_now_read = [], []
for g, k in keys:
    read = re.search(rf"(\.|->){g}\.{k}(_n)?\b|choice\[FM_KEY_{g}_{k}\]", code) is not None
    name = f"{g}.{k}"
    if name in PLAN_ONLY:
        if read:
            print(f"note: {name} is read outside the plan now: remove it from PLAN_ONLY")
        elif "--check" not in keys_def.split(f"FM_KEY({g}, {k},")[1].split("\n")[0]:
            unread.append(name)  # a plan-only key must say so in its help
        continue
    if name in PENDING:
        if read:
            pending_now_read.append(name)
        else:
            print(f"pending: &{g} {k}: {PENDING[name]}")
    elif not read:
        unread.append(name)

print(f"checked {len(keys)} keys against {nfiles} source files")
for name in pending_now_read:
    print(f"note: {name} is read now: remove it from PENDING in tests/cli/keys_read.py")
if unread:
    for name in unread:
        g, k = name.split(".")
        print(f"FAIL: &{g} {k} is bound by no code path (make it work, or remove it from keys.def)")
    sys.exit(1)
print("PASS: every deck key is read by code that acts on it")
