#!/usr/bin/env bash
# tests/require.sh [--cmd CMD PKG | --path PATH PKG | --py MODULE PKG]... -- COMMAND...
# Runs COMMAND when every oracle it needs is there; otherwise a ctest skip
# (exit 77) on a developer machine and a failure in CI (tests/oracle.sh).
# Tests are registered always and decide at run time, so a missing package
# shows as a skip or a failure, never as a test that does not exist.
set -euo pipefail
source "$(dirname "$0")/oracle.sh"
while [ $# -gt 0 ] && [ "$1" != -- ]; do
  case $1 in
    --cmd) fm_need_cmd "$2" "$3" ;;
    --path) fm_need_path "$2" "$3" ;;
    --py) fm_need_py "$2" "$3" ;;
    *) echo "require.sh: unknown option '$1'"; exit 2 ;;
  esac
  shift 3
done
[ "${1:-}" = -- ] && shift
[ $# -gt 0 ] || { echo "require.sh: no command after --"; exit 2; }
exec "$@"
