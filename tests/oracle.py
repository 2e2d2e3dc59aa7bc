"""tests/oracle.py: what a test does when its independent reference (an oracle:
torch, h5py, node, a corpus) is missing. On a developer machine it is a ctest
skip (exit 77; the test sets SKIP_RETURN_CODE 77); in CI (env CI=true, set by
.ci/run) it is a failure. Either way the message names the Debian package.
    import oracle; torch = oracle.need_module("torch", "python3-torch")"""
import importlib, os, sys


def missing(what, package):
    """Exit: 1 in CI, 77 (skip) elsewhere, naming what is missing and its package."""
    if os.environ.get("CI") == "true":
        print(f"FAIL: {what} is missing (install the Debian package {package}, e.g. with bash .ci/setup); "
              "in CI a missing oracle is a failure", flush=True)
        sys.exit(1)
    print(f"SKIP: {what} is missing (install the Debian package {package}, e.g. with bash .ci/setup)", flush=True)
    sys.exit(77)


def need_module(name, package):
    """Import a module or exit as missing()."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        missing(f"python module {name} ({e})", package)
