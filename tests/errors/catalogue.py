#!/usr/bin/env python3
"""catalogue.py: the catalogue of fmhpc's messages, docs/errors.md, kept true.

Every message fmhpc prints for bad input goes through a known sink: a call
whose format argument is a string literal (fm_err, fm_say, fm_deck_error,
fprintf(err, ...), snprintf(why, ...), the parsers' fail helpers; SINKS
below). This script finds each such literal in src/ (adjacent literals
joined) and, for each, the test files that assert it: a test file holding
the message's longest literal piece (backslashes of regexes ignored).

  catalogue.py --write   regenerate docs/errors.md
  catalogue.py --prune   drop the lines of no_test.txt whose message a test
                         asserts now
  catalogue.py --check   (ctest docs.errors_catalogue) fail when a message in
                         the code has no entry, an entry names a message no
                         longer in the code, an entry's test no longer holds
                         the message, a message has neither a test that
                         asserts it nor a line in no_test.txt saying why none
                         does (KINDS: not reachable from input, or todo: no
                         case yet), or a printf-style function that is not
                         in SINKS or NOT_SINKS appears in src/.
"""
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DOC = os.path.join(ROOT, "docs", "errors.md")
NO_TEST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "no_test.txt")

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


def pieces(template, whole=False):
    """The literal pieces of the message's first line (between the %-fields; the hint line is not
    needed), at least 4 characters each; with whole, of every line (for a first line too short)."""
    out = []
    lines = template.split("\\n") if whole else [template.split("\\n")[0] or template]
    for line in lines:
        for p in SPEC.sub("\x00", line).split("\x00"):
            p = p.replace("\\", "").strip(" :'\"")  # a test's text is read without backslashes
            if len(p) >= 4:
                out.append(p)
    return out


def matcher(template):
    """A regex a test asserting the message matches: its literal pieces in order, each within 200
    characters of the last (a test fills the fields or writes .* for them). When the first line's
    pieces hold fewer than 15 characters, the hint lines' pieces join them; when those are still
    fewer than 15 characters (too little to tell one message from another in a test's text), the
    test must hold the whole message as one quoted string (its fields filled, no line break), the
    way produce.py writes an expected text; None when its pieces hold fewer than 8 characters."""
    ps = pieces(template)
    if sum(len(p) for p in ps) >= 15:
        return re.compile(r"[\s\S]{0,200}?".join(re.escape(p) for p in ps))
    ps = pieces(template, whole=True)
    if sum(len(p) for p in ps) >= 15:
        return re.compile(r"[\s\S]{0,200}?".join(re.escape(p) for p in ps))
    if sum(len(p) for p in ps) < 8:
        return None  # 'hint: %s', '%s: ': the frame of messages composed elsewhere
    first = (template.split("\\n")[0] or template).replace("\\", "")
    parts = SPEC.sub("\x00", first).split("\x00")
    rx = r"[^\"\n]*".join(re.escape(t) for t in parts)
    # a trailing field (a library's words) may be left out, and a message printed in pieces goes on
    return re.compile(r"[\"'](?:[^\"'\n]*: )?" + rx + r"[^\"\n]*[\"']")


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
                    if p not in (os.path.abspath(__file__), NO_TEST):
                        # adjacent string literals are one string (Python, C)
                        texts[os.path.relpath(p, ROOT)] = re.sub(r'"[ \t]*\n[ \t]*[rbf]?"', "", t.replace("\\", ""))
    return texts


def short(template):
    """True when the message is matched as a whole quoted text (see matcher)."""
    return sum(len(p) for p in pieces(template, whole=True)) < 15


def asserts(test_text, template, test_path=None):
    """A short message counts only in the producing tables of tests/errors/ and the unit tests, whose
    cases hold each expected text whole; elsewhere a quoted 'cannot write ...' is a test's own."""
    m = matcher(template)
    if m and short(template) and test_path is not None and not test_path.startswith(("tests/errors/", "tests/unit/")):
        return False
    return bool(m and m.search(test_text))


def tests_for(template, texts):
    return sorted(p for p, t in texts.items() if asserts(t, template, p))


def md(s):
    return s.replace("|", "\\|").replace("`", "'")


KINDS = {
    "internal": "an internal invariant (a caller's bug, not reachable from input)",
    "alloc": "allocation failure",
    "device": "CUDA/NCCL/device failure (no device on the CI machine)",
    "mpi": "MPI failure or a multi-rank layout",
    "build": "a build or host without a feature (PLplot, NCCL, big-endian)",
    "env": "a failing file system or OS call after the file was opened (read error, fsync, mmap)",
    "hook": "a test hook (FMHPC_*_TEST_* variables), not a user's input",
    "frame": "the frame of a message composed elsewhere (its text is catalogued there)",
    "todo": "user input, no producing test yet",
}


def no_test_table():
    """{(file, message as in the C source): (kind, reason)} from tests/errors/no_test.txt: the
    messages no test produces, each with why (lines 'FILE || MESSAGE || KIND: REASON')."""
    table, problems = {}, []
    for n, line in enumerate(open(NO_TEST, encoding="utf-8").read().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split(" || ")
        kind = parts[2].split(":", 1)[0] if len(parts) == 3 else ""
        if len(parts) != 3 or kind not in KINDS or not parts[2].split(":", 1)[1:] or \
                not parts[2].split(":", 1)[1].strip():
            problems.append(f"tests/errors/no_test.txt:{n}: expected 'FILE || MESSAGE || KIND: REASON' with KIND "
                            f"one of {', '.join(KINDS)}")
            continue
        table[(parts[0], parts[1])] = (kind, parts[2].split(":", 1)[1].strip())
    return table, problems


def column(tests, why):
    if tests:
        return ", ".join(tests[:3]) + (" ..." if len(tests) > 3 else "")
    if why:
        return ("no test yet: " if why[0] == "todo" else f"no test ({why[0]}): ") + md(why[1])
    return "not asserted"


def render(found, texts, table):
    seen, rows = set(), {}
    for rel, line, name, text, hint in found:
        if (rel, text) in seen:
            continue
        seen.add((rel, text))
        module = rel.split("/")[1] if rel.count("/") >= 2 else "main"
        rows.setdefault(module, []).append((rel, text, hint, tests_for(text, texts), table.get((rel, text))))
    allrows = [r for v in rows.values() for r in v]
    total = len(allrows)
    tested = sum(1 for r in allrows if r[3])
    todo = sum(1 for r in allrows if not r[3] and r[4] and r[4][0] == "todo")
    other = sum(1 for r in allrows if not r[3] and r[4] and r[4][0] != "todo")
    out = ["# fmhpc's messages", "",
           "Every message fmhpc prints for bad input (a deck, a command line, a data file, a checkpoint, a",
           "safetensors or tokenizer file, a failing file system) and for the faults it detects, with the test",
           "files that assert it. A message names the file and place (`file:line:col` for decks and JSON),",
           "the rule that was broken, and on a second line a `hint:` with what to do. `%s`, `%lld` ... are",
           "filled in at run time (a path, a value, a limit).", "",
           "Generated by `python3 tests/errors/catalogue.py --write` from the format strings of src/ (the",
           "message sinks are listed in that script). The test `docs.errors_catalogue` fails when a message in",
           "the code has no entry here, an entry's message is no longer in the code, a test named here no",
           "longer asserts it, or a message has neither a test nor a reason in `tests/errors/no_test.txt`.",
           "Most messages of bad input are produced by the cases of `tests/errors/produce.py`. A message with",
           "no test says why: `no test (KIND)` for one that input cannot reach, `no test yet` for input that",
           "no test produces yet. The kinds:", ""]
    out += [f"- `{k}`: {v}" for k, v in KINDS.items()]
    out += ["", f"{total} messages; {tested} asserted by a test; {todo} of user input with no test yet; "
            f"{other} not reachable from user input (by kind above); {total - tested - todo - other} with neither.", ""]
    for module in sorted(rows):
        out += [f"## {module}", "", "| message | where | asserted by |", "| --- | --- | --- |"]
        for rel, text, hint, tests, why in rows[module]:
            msg = "`" + md(text) + "`" + (" (hint: `" + md(hint) + "`)" if hint else "")
            out.append(f"| {msg} | {rel} | {column(tests, why)} |")
        out.append("")
    return "\n".join(out)


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "--check"
    found, printf_like = messages()
    texts = test_texts()
    table, problems = no_test_table()
    if mode == "--prune":  # drop the no_test.txt lines of messages a test asserts now
        lines = open(NO_TEST, encoding="utf-8").read().splitlines(keepends=True)
        keep = [x for x in lines if x.startswith("#") or len(x.split(" || ")) != 3 or
                not tests_for(x.split(" || ")[1], texts)]
        open(NO_TEST, "w", encoding="utf-8").writelines(keep)
        print(f"tests/errors/no_test.txt: {len(lines) - len(keep)} line(s) of messages now asserted removed")
        return 0
    if mode == "--write":
        os.makedirs(os.path.dirname(DOC), exist_ok=True)
        open(DOC, "w", encoding="utf-8").write(render(found, texts, table))
        print(f"wrote {os.path.relpath(DOC, ROOT)}: {len(set((f, t) for f, _, _, t, _ in found))} messages")
        for p in problems:
            print("warning: " + p)
        return 0
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
            col = m.group(3)
            entries[(m.group(2), m.group(1))] = [] if col == "not asserted" or col.startswith("no test") else \
                [t for t in col.replace(" ...", "").split(", ")]
    code = {(rel, md(text)): text for rel, _, _, text, _ in found}
    for (rel, text), raw in sorted(code.items()):
        if (rel, text) not in entries:
            problems.append(f"{rel}: message \"{raw}\" has no entry in docs/errors.md")
        elif not entries[(rel, text)] and (rel, raw) not in table and not tests_for(raw, texts):
            problems.append(f"{rel}: message \"{raw}\" has neither a test that asserts it nor a reason in "
                            f"tests/errors/no_test.txt (add a case to tests/errors/produce.py, or a line "
                            f"'{rel} || {raw} || KIND: why')")
    raws = {(rel, raw) for (rel, _), raw in code.items()}
    for key in sorted(table):
        if key not in raws:
            problems.append(f"tests/errors/no_test.txt: \"{key[1]}\" ({key[0]}) is no longer a message of the code")
        elif tests_for(key[1], texts):
            print(f"note: tests/errors/no_test.txt: \"{key[1]}\" ({key[0]}) is asserted by a test now: its line can go")
    for (rel, text), tests in sorted(entries.items()):
        if (rel, text) not in code:
            problems.append(f"docs/errors.md: entry \"{text}\" ({rel}) is no longer a message of the code")
            continue
        for t in tests:
            if t not in texts or not asserts(texts[t], code[(rel, text)], t):
                problems.append(f"docs/errors.md: {t} is said to assert \"{text}\" but no longer holds it")
    n_tested = sum(1 for v in entries.values() if v)
    print(f"catalogue: {len(code)} messages in src/ through {len(SINKS)} sinks; {len(entries)} entries in "
          f"docs/errors.md, {n_tested} asserted by a test, {len(table)} with a reason for no test")
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
