#!/usr/bin/env python3
"""catalogue.py: the catalogue of fmhpc's messages, docs/errors.md, kept true.

Every message fmhpc prints for bad input goes through a known sink: a call
whose format argument is a string literal (fm_err, fm_say, fm_deck_error,
fprintf(err, ...), snprintf(why, ...), the parsers' fail helpers; SINKS
below). This script finds each such literal in src/ (adjacent literals
joined) and, for each, the test files that assert it: a test file holding
the message's longest literal piece (backslashes of regexes ignored).

  catalogue.py --write   regenerate docs/errors.md
  catalogue.py --check   (ctest docs.errors_catalogue) fail when a message in
                         the code has no entry, an entry names a message no
                         longer in the code, an entry's test no longer holds
                         the message, or a printf-style function that is
                         not in SINKS or NOT_SINKS appears in src/.
"""
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DOC = os.path.join(ROOT, "docs", "errors.md")

# name -> (1-based index of the format argument, a test on the first argument or None)
ERRSTREAM = re.compile(r"^(stderr|err|(.*(->|\.))err)$")
WHYBUF = re.compile(r"^(why|hint|msg|(.*(->|\.))(why|hint|msg))$")
SINKS = {
    "fm_err": (1, None), "fm_warn0": (1, None), "fm_abort_one": (2, None), "fm_say": (3, None),
    "fm_deck_error": (4, None), "bad": (5, None), "fm__hf_problem": (2, None), "bad_arg": (3, None),
    "layout_fail": (3, None), "report": (8, None), "fail_at": (4, None), "fail": (2, None),
    "fprintf": (2, ERRSTREAM), "snprintf": (3, WHYBUF),
}
# printf-style functions that print no message of their own (logs, string builders, the emulator's own)
NOT_SINKS = {"fm_log0", "fm_str_printf"}
HINT_ARG = {"fm_say": 2}  # fm_say(err, hint, fmt, ...)

SPEC = re.compile(r"%[-+ #0']*(\*|\d+)?(\.(\*|\d+))?(hh|h|ll|l|z|j|t|L)?[diouxXeEfgGcspn%]|\" *PRI[a-zA-Z0-9]+ *\"")


def strip_comments(src):
    """Comments become spaces (line numbers kept); strings and chars are left."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if c == '"' or c == "'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            out.append(src[i:j + 1])
            i = j + 1
        elif src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def split_args(src, i):
    """src[i] == '(': the call's top-level arguments and the index after ')'."""
    depth, args, start, j = 0, [], i + 1, i
    while j < len(src):
        c = src[j]
        if c in "\"'":
            k = j + 1
            while k < len(src) and src[k] != c:
                k += 2 if src[k] == "\\" else 1
            j = k
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                args.append(src[start:j].strip())
                return args, j + 1
        elif c == "," and depth == 1:
            args.append(src[start:j].strip())
            start = j + 1
        j += 1
    return args, j


LIT = re.compile(r'"((?:[^"\\]|\\.)*)"')


def literal(arg):
    """The joined text of an argument made of string literals (and PRI macros), else None."""
    rest = LIT.sub("", arg)
    if re.sub(r"\bPRI[a-zA-Z0-9]+\b", "", rest).strip() or not LIT.search(arg):
        return None
    return "".join(m.group(1) for m in LIT.finditer(arg))


def messages():
    """[(file, line, sink, template, hint)] for every literal message in src/."""
    found, printf_like = [], set()
    call = re.compile(r"\b(" + "|".join(sorted(SINKS, key=len, reverse=True)) + r")\s*\(")
    for dirpath, _, files in os.walk(os.path.join(ROOT, "src")):
        if "/emu" in dirpath:
            continue  # the SIMT emulator's own diagnostics are for kernel authors
        for f in sorted(files):
            if not f.endswith((".c", ".h", ".cu", ".cuh")):
                continue
            path = os.path.join(dirpath, f)
            src = strip_comments(open(path, encoding="utf-8").read())
            rel = os.path.relpath(path, ROOT)
            for m in re.finditer(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(([^;{()]|\([^()]*\))*\)\s*__attribute__\s*\(\(\s*format\s*\(\s*printf", src):
                printf_like.add(m.group(1))
            for m in call.finditer(src):
                name = m.group(1)
                before = src[max(0, m.start() - 40):m.start()]
                if re.search(r"(void|int|static)\s+$", before):
                    continue  # a definition or declaration, not a call
                args, _ = split_args(src, m.end() - 1)
                idx, first_ok = SINKS[name]
                if len(args) < idx or (first_ok and not first_ok.match(args[0])):
                    continue
                text = literal(args[idx - 1])
                if text is None or not text.strip(" \\n"):
                    continue
                hint = literal(args[HINT_ARG[name] - 1]) if name in HINT_ARG and len(args) >= HINT_ARG[name] else None
                line = src.count("\n", 0, m.start()) + 1
                found.append((rel, line, name, text, hint))
    return found, printf_like


def pieces(template):
    """The literal pieces of the message's first line (between the %-fields; the hint line is not
    needed), at least 4 characters each."""
    out = []
    first = template.split("\\n")[0] or template
    for p in SPEC.sub("\x00", first).split("\x00"):
        p = p.replace('\\"', '"').replace("\\\\", "\\").strip(" :'\"")
        if len(p) >= 4:
            out.append(p)
    return out


def matcher(template):
    """A regex a test asserting the message matches: its literal pieces in order, each within 200
    characters of the last (a test fills the fields or writes .* for them); None when the pieces hold
    fewer than 15 characters (too little to tell one message from another)."""
    ps = pieces(template)
    if sum(len(p) for p in ps) < 15:
        return None
    return re.compile(r"[\s\S]{0,200}?".join(re.escape(p) for p in ps))


def test_texts():
    texts = {}
    for top in ("tests", "regression"):
        for dirpath, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d not in ("node_modules", "reference", "fuzz")]
            for f in files:
                if f.endswith((".c", ".h", ".sh", ".py", ".cmake", ".txt", ".in")):
                    p = os.path.join(dirpath, f)
                    try:
                        t = open(p, encoding="utf-8").read()
                    except (UnicodeDecodeError, OSError):
                        continue
                    if p != os.path.abspath(__file__):
                        texts[os.path.relpath(p, ROOT)] = t.replace("\\", "")
    return texts


def asserts(test_text, template):
    m = matcher(template)
    return bool(m and m.search(test_text))


def tests_for(template, texts):
    return sorted(p for p, t in texts.items() if asserts(t, template))


def md(s):
    return s.replace("|", "\\|").replace("`", "'")


def render(found, texts):
    seen, rows = set(), {}
    for rel, line, name, text, hint in found:
        if (rel, text) in seen:
            continue
        seen.add((rel, text))
        module = rel.split("/")[1] if rel.count("/") >= 2 else "main"
        rows.setdefault(module, []).append((rel, text, hint, tests_for(text, texts)))
    total = sum(len(v) for v in rows.values())
    tested = sum(1 for v in rows.values() for r in v if r[3])
    out = ["# fmhpc's messages", "",
           "Every message fmhpc prints for bad input (a deck, a command line, a data file, a checkpoint, a",
           "safetensors or tokenizer file, a failing file system) and for the faults it detects, with the test",
           "files that assert it. A message names the file and place (`file:line:col` for decks and JSON),",
           "the rule that was broken, and on a second line a `hint:` with what to do. `%s`, `%lld` ... are",
           "filled in at run time (a path, a value, a limit).", "",
           "Generated by `python3 tests/errors/catalogue.py --write` from the format strings of src/ (the",
           "message sinks are listed in that script). The test `docs.errors_catalogue` fails when a message in",
           "the code has no entry here, an entry's message is no longer in the code, or a test named here no",
           "longer asserts it. \"not asserted\" means no test checks that text yet (the message may still be",
           "produced by a test that checks only the exit status).", "",
           f"{total} messages; {tested} asserted by a test, {total - tested} not asserted.", ""]
    for module in sorted(rows):
        out += [f"## {module}", "", "| message | where | asserted by |", "| --- | --- | --- |"]
        for rel, text, hint, tests in rows[module]:
            msg = "`" + md(text) + "`" + (" (hint: `" + md(hint) + "`)" if hint else "")
            out.append(f"| {msg} | {rel} | {', '.join(tests[:3]) + (' ...' if len(tests) > 3 else '') if tests else 'not asserted'} |")
        out.append("")
    return "\n".join(out)


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "--check"
    found, printf_like = messages()
    texts = test_texts()
    if mode == "--write":
        os.makedirs(os.path.dirname(DOC), exist_ok=True)
        open(DOC, "w", encoding="utf-8").write(render(found, texts))
        print(f"wrote {os.path.relpath(DOC, ROOT)}: {len(set((f, t) for f, _, _, t, _ in found))} messages")
        return 0
    problems = []
    unknown = printf_like - set(SINKS) - NOT_SINKS
    for u in sorted(unknown):
        problems.append(f"src/ has a printf-style function '{u}' that is neither a message sink nor listed as "
                        f"not one: add it to SINKS or NOT_SINKS in tests/errors/catalogue.py")
    try:
        doc = open(DOC, encoding="utf-8").read()
    except OSError as e:
        print(f"FAIL: {DOC}: {e}\nhint: python3 tests/errors/catalogue.py --write")
        return 1
    entries = {}
    for line in doc.splitlines():
        m = re.match(r"^\| `((?:[^`])*)`(?: \(hint: `[^`]*`\))? \| (\S+) \| (.*) \|$", line)
        if m:
            entries[(m.group(2), m.group(1))] = [] if m.group(3) == "not asserted" else \
                [t for t in m.group(3).replace(" ...", "").split(", ")]
    code = {(rel, md(text)): text for rel, _, _, text, _ in found}
    for (rel, text), raw in sorted(code.items()):
        if (rel, text) not in entries:
            problems.append(f"{rel}: message \"{raw}\" has no entry in docs/errors.md")
    for (rel, text), tests in sorted(entries.items()):
        if (rel, text) not in code:
            problems.append(f"docs/errors.md: entry \"{text}\" ({rel}) is no longer a message of the code")
            continue
        for t in tests:
            if t not in texts or not asserts(texts[t], code[(rel, text)]):
                problems.append(f"docs/errors.md: {t} is said to assert \"{text}\" but no longer holds it")
    n_tested = sum(1 for v in entries.values() if v)
    print(f"catalogue: {len(code)} messages in src/ through {len(SINKS)} sinks; {len(entries)} entries in "
          f"docs/errors.md, {n_tested} asserted by a test")
    if len(code) < 100:
        problems.append(f"only {len(code)} messages found in src/: the extraction is broken")
    for p in problems[:50]:
        print("FAIL: " + p)
    if problems:
        print(f"{len(problems)} problem(s)\nhint: python3 tests/errors/catalogue.py --write, then review the diff")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
