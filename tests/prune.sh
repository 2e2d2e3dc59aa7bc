# tests/prune.sh: sourced by test scripts (bash) whose runs leave large files.
# A passing case calls fm_prune on its run directories after its last check:
# the checkpoints (step_*.h5) and HF exports (model.safetensors) under them go,
# their logs, metrics and summaries stay. Without it a full ctest run left
# about 8.5 GB in the build tree, and one CI machine's disk filled. A failing
# case never reaches the call and keeps everything for a look; so does every
# case with FMHPC_KEEP_WORK=1 in its environment.
#   fm_prune DIR...      DIR relative to the script's working directory or absolute
fm_prune() {
  [ "${FMHPC_KEEP_WORK:-0}" = 1 ] && return 0
  local d
  for d in "$@"; do
    [ -d "$d" ] || continue
    find "$d" -type f \( -name 'step_*.h5' -o -name 'step_*.h5.partial' -o -name 'model.safetensors' \) -delete
  done
  return 0 # a file that would not go is not a failure of the case
}
