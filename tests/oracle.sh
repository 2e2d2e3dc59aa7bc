# tests/oracle.sh: sourced by test scripts (bash). What a test does when its
# independent reference (torch, node, a corpus, a tmpfs mount) is missing: on
# a developer machine a ctest skip (exit 77, SKIP_RETURN_CODE 77); in CI (env
# CI=true, set by .ci/run) a failure. The message names the package. As
# tests/oracle.py.
#   fm_missing WHAT PACKAGE       exits 1 in CI, 77 elsewhere
#   fm_need_cmd CMD PACKAGE       fm_missing unless CMD is on PATH
#   fm_need_path PATH PACKAGE     fm_missing unless PATH exists
#   fm_need_py MODULE PACKAGE     fm_missing unless /usr/bin/python3 imports MODULE
fm_missing() {
  if [ "${CI:-}" = true ]; then
    echo "FAIL: $1 is missing (install $2, e.g. with bash .ci/setup); in CI a missing oracle is a failure"
    exit 1
  fi
  echo "SKIP: $1 is missing (install $2, e.g. with bash .ci/setup)"
  exit 77
}
fm_need_cmd() { command -v "$1" > /dev/null || fm_missing "command $1" "$2"; }
fm_need_path() { [ -e "$1" ] || fm_missing "$1" "$2"; }
fm_need_py() { /usr/bin/python3 -c "import $1" 2> /dev/null || fm_missing "python module $1" "$2"; }
