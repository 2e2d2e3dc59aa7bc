#!/usr/bin/env python3
"""Module layering check (DESIGN.md section 2, "Module rules").

Reads every #include under src/ and include/fmhpc/, maps each file to its
module (src/<module>/..., src/main.c is `main`, a public header by the table
HEADERS below) and fails when a module includes a header of a module that is
not strictly below it, or a private (src/) header of another module.

The order, lowest first; modules on one line are siblings and may not include
one another:
    core < deck, runtime, tensor, metrics < model, optim, tokenizer
         < data, clean, dist < ckpt, interop < eval < train < main
Two sibling includes are allowed (ALLOWED below): metrics -> deck, since the
resolved deck is stored in every metrics file (DESIGN section 3); interop ->
ckpt, since the one model loader (interop/load.c) takes an fmhpc checkpoint's
weights as well as an HF directory's.
Also from DESIGN: CUDA, cuBLAS and NCCL headers only in tensor/cuda/ and
runtime/comm_nccl.c; HDF5 only in data/ and ckpt/.

usage: check_includes.py REPO_ROOT
"""
import os
import re
import sys

LEVELS = [
    ["core"],
    ["deck", "runtime", "tensor", "metrics"],
    ["model", "optim", "tokenizer"],
    ["data", "clean", "dist"],
    ["ckpt", "interop"],
    ["eval"],
    ["train"],
    ["main"],
]
LEVEL = {m: i for i, mods in enumerate(LEVELS) for m in mods}

# Sibling includes DESIGN itself implies, each with its reason.
ALLOWED = {
    ("metrics", "deck"): "DESIGN section 3: the resolved deck is stored in every metrics file",
    ("interop", "ckpt"): "the model loader (interop/load.c) reads a checkpoint's weights as well as HF's",
}

# Every public header and the module whose interface it is. A header missing
# here fails the check: place it when you add it.
HEADERS = {
    "core.h": "core", "json.h": "core", "hash.h": "core", "rng.h": "core", "progress.h": "core",
    "deck.h": "deck",
    # the registries' lines: the deck builds its choice lists from them
    "tasks.def": "deck", "models.def": "deck", "optimizers.def": "deck", "schedules.def": "deck",
    "runtime.h": "runtime",
    "tensor.h": "tensor", "backend.h": "tensor", "ops.def": "tensor",
    "metrics.h": "metrics",
    "model.h": "model",
    "optim.h": "optim",
    "tokenizer.h": "tokenizer",
    "data.h": "data",
    "clean.h": "clean",
    "ckpt.h": "ckpt",
    "interop.h": "interop",
    "eval.h": "eval", "generate.h": "eval",
    "train.h": "train",
    "dist.h": "dist",
}

# System headers only some places may include: (regex, allowed path prefixes).
SYSTEM_RULES = [
    (r"(cuda|cuda_runtime|cuda_bf16|cublas_v2|cublasLt|nccl)\.h", ("src/tensor/cuda/", "src/runtime/comm_nccl.c")),
    (r"hdf5\.h", ("src/data/", "src/ckpt/")),
]

SOURCE_EXT = (".c", ".h", ".def", ".cu", ".cuh")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def module_of(rel):
    """Module of a repository-relative path, or None when outside the layout."""
    parts = rel.split("/")
    if parts[0] == "include" and len(parts) == 3 and parts[1] == "fmhpc":
        return HEADERS.get(parts[2], "?" + parts[2])
    if parts[0] == "src":
        if len(parts) == 2:
            return "main" if parts[1] == "main.c" else "?" + parts[1]
        return parts[1]
    return None


def files(root):
    out = []
    for top in ("src", os.path.join("include", "fmhpc")):
        for d, _, names in os.walk(os.path.join(root, top)):
            for n in names:
                if n.endswith(SOURCE_EXT):
                    out.append(os.path.relpath(os.path.join(d, n), root).replace(os.sep, "/"))
    return sorted(out)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    root = os.path.abspath(sys.argv[1])
    bad = []
    nfiles = ninc = nmod = 0
    for rel in files(root):
        me = module_of(rel)
        nfiles += 1
        if me.startswith("?"):
            bad.append(f"{rel}: not in a known module ({me[1:]}): add it to HEADERS or LEVELS in {sys.argv[0]}")
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
        for ln, line in enumerate(lines, 1):
            m = INCLUDE_RE.match(line)
            if not m:
                continue
            ninc += 1
            kind, name = m.groups()
            where = f"{rel}:{ln}"
            if kind == "<":
                for pat, allowed in SYSTEM_RULES:
                    if re.fullmatch(pat, name) and not rel.startswith(allowed):
                        bad.append(f"{where}: <{name}> is allowed only in {', '.join(allowed)}")
                continue
            if name.startswith("fmhpc/"):
                target = "include/" + name
            else:  # relative to the including file, as the compiler looks first
                target = os.path.normpath(os.path.join(os.path.dirname(rel), name)).replace(os.sep, "/")
            if not os.path.exists(os.path.join(root, target)):
                bad.append(f"{where}: \"{name}\" not found under the repository")
                continue
            them = module_of(target)
            if them is None:
                bad.append(f"{where}: \"{name}\" is outside src/ and include/fmhpc/")
                continue
            nmod += 1
            if them.startswith("?"):
                bad.append(f"{where}: {target} is in no known module")
            elif them == me or (me, them) in ALLOWED:
                continue
            elif target.startswith("src/"):
                bad.append(f"{where}: {me} includes {target}, a private header of {them}")
            elif LEVEL[them] >= LEVEL[me]:
                how = "a sibling" if LEVEL[them] == LEVEL[me] else "above it"
                bad.append(f"{where}: {me} (level {LEVEL[me]}) includes {name} of {them} (level {LEVEL[them]}), {how}")
    print("layering: order " + " < ".join(", ".join(mods) for mods in LEVELS))
    for (a, b), why in ALLOWED.items():
        print(f"layering: allowed sibling include {a} -> {b} ({why})")
    print(f"layering: read {nfiles} files under src/ and include/fmhpc/, {ninc} #include lines, "
          f"{nmod} of them fmhpc headers")
    if nfiles == 0 or nmod == 0:
        print("FAIL: layering: nothing read (wrong repository root?)")
        return 1
    for b in bad:
        print("FAIL: " + b)
    if bad:
        print(f"FAIL: layering: {len(bad)} violation(s)")
        return 1
    print("PASS: layering: no module includes one at or above its level")
    return 0


if __name__ == "__main__":
    sys.exit(main())
