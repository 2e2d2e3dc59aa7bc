#!/usr/bin/env bash
# install.sh BUILD_DIR: `cmake --install` into a scratch prefix, then load the
# installed Tcl modulefile with Environment Modules and check that it puts the
# installed fmhpc on PATH with its decks and Slurm scripts beside it. Then move
# the tree and load it again: the modulefile must be relocatable.
set -euo pipefail
build=$1
prefix=$build/test-install/fmhpc
rm -rf "$build/test-install"
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/fmhpc share/fmhpc/inputs/llama_1p2b.in share/fmhpc/slurm/train_1p2b.sh \
         share/modulefiles/fmhpc/0.1.0 share/lmod/fmhpc/0.1.0.lua share/doc/fmhpc/LICENSE; do
  [ -e "$prefix/$f" ] || { echo "missing after install: $f"; exit 1; }
done
[ -x "$prefix/share/fmhpc/slurm/train_1p2b.sh" ] || { echo "slurm script lost its x bit"; exit 1; }
source /usr/share/modules/init/bash
check() {
  local p=$1
  module purge
  module use "$p/share/modulefiles"
  module load fmhpc
  [ "$(command -v fmhpc)" = "$p/bin/fmhpc" ] || { echo "module put $(command -v fmhpc) on PATH, not $p/bin/fmhpc"; exit 1; }
  [ "$FMHPC_HOME" = "$p" ] || { echo "FMHPC_HOME=$FMHPC_HOME, expected $p"; exit 1; }
  fmhpc --check "$FMHPC_INPUTS/llama_1p2b.in" | grep -q "parameters 1,203,807,744" || { echo "installed fmhpc --check failed"; exit 1; }
  module unload fmhpc
  module unuse "$p/share/modulefiles"
}
check "$prefix"
mv "$prefix" "$prefix-moved"
check "$prefix-moved"
echo "install and modulefile OK (relocated too)"
