# cli.cmake: tests of the fmhpc command itself (label unit): --check plans,
# one report from rank 0 under mpirun, clear failures on bad decks.
set(FM_EXPECT ${CMAKE_CURRENT_LIST_DIR}/expect.cmake)
set(FM_IN ${PROJECT_SOURCE_DIR}/inputs)
set(FM_BAD ${PROJECT_SOURCE_DIR}/tests/decks)
set(FM_MPI ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG})

# fm_cli_test(name RC rc CMD ... [MATCH re ...] [NOMATCH re] [COUNT_RE re COUNT n])
function(fm_cli_test name)
  cmake_parse_arguments(A "" "RC;NOMATCH;COUNT_RE;COUNT" "CMD;MATCH" ${ARGN})
  string(REPLACE ";" "@@" match "${A_MATCH}")
  set(args -DRC=${A_RC} "-DMATCH=${match}")
  if(DEFINED A_NOMATCH)
    list(APPEND args -DNOMATCH=${A_NOMATCH})
  endif()
  if(DEFINED A_COUNT_RE)
    list(APPEND args -DCOUNT_RE=${A_COUNT_RE} -DCOUNT=${A_COUNT})
  endif()
  add_test(NAME cli.${name} COMMAND ${CMAKE_COMMAND} ${args} -P ${FM_EXPECT} -- ${A_CMD})
  set_tests_properties(cli.${name} PROPERTIES LABELS unit ENVIRONMENT "${FMHPC_TEST_ENV}" TIMEOUT 120)
endfunction()

# The flagship's exact parameter count, from the model's tensor table.
fm_cli_test(check_flagship RC 0 CMD $<TARGET_FILE:fmhpc> --check ${FM_IN}/llama_1p2b.in
            MATCH "parameters 1,203,807,744" "== plan for 1 rank: dp 1 x tp 1 =="
                  "== resolved deck ==" "d_model *= *1536")
# Under mpirun -n 4: one report, from rank 0, and exit 0.
fm_cli_test(check_flagship_np4 RC 0 CMD ${FM_MPI} 4 $<TARGET_FILE:fmhpc> --check ${FM_IN}/llama_1p2b.in
            MATCH "== plan for 4 ranks: dp 4 x tp 1 ==" "parameters 1,203,807,744"
            COUNT_RE "== plan for" COUNT 1)
fm_cli_test(check_what_if_ranks RC 0 CMD $<TARGET_FILE:fmhpc> --check --ranks 64 ${FM_IN}/llama2.in
            MATCH "== plan for 64 ranks: dp 8 x tp 8 ==" "parameters 6,738,415,616 \\(842,534,912 per rank"
                  "tp scratch .* 168,656,896 B" "total +[0-9.]+ GiB +15,507,078,976 B" "over tp \\(8 ranks" "activation sums .* B   \\(tp-1\\)"
                  "over dp \\(8 ranks" "gradient reduce-scatter .* 5,897,945,088 B")
# --check's per-rank memory and per-step communication at dp x tp, and its fit
# suggestion, equal a second derivation by hand in Python (small models and the 7B).
add_test(NAME cli.check_plan_by_hand COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/check_plan.py
         $<TARGET_FILE:fmhpc> ${FM_IN} $<TARGET_FILE:fmhpc_emu>)
set_tests_properties(cli.check_plan_by_hand PROPERTIES LABELS unit ENVIRONMENT "${FMHPC_TEST_ENV}" TIMEOUT 120)
fm_cli_test(check_gpt2_small RC 0 CMD $<TARGET_FILE:fmhpc> --check ${FM_IN}/gpt2_small.in
            MATCH "parameters 124,439,808")
foreach(deck gpt2_nano llama_nano)
  fm_cli_test(check_${deck} RC 0 CMD $<TARGET_FILE:fmhpc> --check ${FM_IN}/${deck}.in MATCH "== plan for 1 rank")
endforeach()
# --check of another task's deck: no training plan of a default model it never builds (it printed one)
fm_cli_test(check_prep_deck RC 0 CMD $<TARGET_FILE:fmhpc> --check ${FM_IN}/prep_sft.in
            MATCH "the deck is valid for task 'prep' \\(its files are read when it runs\\); the plan")
# Training builds the dp x tp mesh: a tp that does not divide the ranks is refused before any work
# (tp > 1 training itself: regression.tp_*).
fm_cli_test(train_tp_world RC 2 CMD $<TARGET_FILE:fmhpc> ${FM_IN}/gpt2_nano.in parallel%tp=2
            MATCH "tp = 2 does not divide the 1 rank")
# tp must divide n_kv_head (the nano Llama with 4 KV heads): the error names the valid values.
fm_cli_test(check_tp_not_dividing_kv RC 2 CMD $<TARGET_FILE:fmhpc> --check --ranks 3 ${FM_IN}/llama_nano.in model%n_kv_head=4 parallel%tp=3
            MATCH "parallel tp" "4 key/value heads" "valid tp values are 1, 2, 4")
# dp must divide the micro-batch count: 128 micro-batches cannot go to 3 ranks.
fm_cli_test(check_dp_not_dividing RC 2 CMD $<TARGET_FILE:fmhpc> --check --ranks 3 ${FM_IN}/llama_1p2b.in
            MATCH "llama_1p2b.in:[0-9]+:[0-9]+: &train global_batch" "3 data-parallel ranks")
# Overrides after the deck win, and land in the resolved deck.
fm_cli_test(check_override RC 0 CMD $<TARGET_FILE:fmhpc> --check ${FM_IN}/llama_1p2b.in model%n_layer=12
            MATCH "n_layer *= *12" "parameters 755,504,640")
fm_cli_test(help_deck RC 0 CMD $<TARGET_FILE:fmhpc> --help-deck MATCH "&model" "d_model" "&optim" "betas")
fm_cli_test(version RC 0 CMD $<TARGET_FILE:fmhpc> --version MATCH "fmhpc [0-9]+\\.[0-9]+\\.[0-9]+ \\(git [0-9a-f]+\\)"
            "cpu gemm: OpenBLAS core [A-Za-z0-9]+ \\(")
fm_cli_test(unknown_option RC 2 CMD $<TARGET_FILE:fmhpc> --frobnicate MATCH "unknown option '--frobnicate'")
fm_cli_test(missing_deck RC 2 CMD $<TARGET_FILE:fmhpc> --check no/such/deck.in MATCH "cannot read deck 'no/such/deck.in'")
# A device named as a deck is refused at 16 MiB (it was read until memory ran out).
fm_cli_test(deck_dev_zero RC 2 CMD $<TARGET_FILE:fmhpc> --check /dev/zero
            MATCH "fmhpc: deck '/dev/zero' holds more than 16 MiB: a deck is a namelist text of a few KiB")
# key=value without its group names no file: the groups with that key (it was "cannot read deck ...: check the path").
fm_cli_test(override_without_group RC 2 CMD $<TARGET_FILE:fmhpc> --check ${FM_IN}/gpt2_nano.in lr=3e-4
            MATCH "fmhpc: 'lr=3e-4' is neither a deck file nor an override \\(group%key=value\\): it has no group"
                  "hint: name the group: 'optim%lr=3e-4'")
fm_cli_test(override_without_group_no_key RC 2 CMD $<TARGET_FILE:fmhpc> --check ${FM_IN}/gpt2_nano.in frob=1
            MATCH "hint: no deck group has a key 'frob'; fmhpc --help-deck lists them")
# No &data train is refused before the model is built (the 124M's allocation and init took 20 s first).
fm_cli_test(train_no_store_before_model RC 2 CMD $<TARGET_FILE:fmhpc> ${FM_IN}/gpt2_small.in "data%train=''"
            "run%out_dir='cli_no_store_run'"
            MATCH "&data train = '': training needs a store" NOMATCH "model gpt2 on cpu")
# -x is an unknown option, not a deck path.
fm_cli_test(unknown_short_option RC 2 CMD $<TARGET_FILE:fmhpc> -x ${FM_IN}/gpt2_nano.in
            MATCH "fmhpc: unknown option '-x'" "a deck whose name starts with '-' is ./-x")
# --version and --help-deck take no deck (one given was dropped without a word).
fm_cli_test(version_with_deck RC 2 CMD $<TARGET_FILE:fmhpc> --version ${FM_IN}/gpt2_nano.in
            MATCH "fmhpc: --version runs on its own: it takes no deck")
fm_cli_test(help_deck_with_override RC 2 CMD $<TARGET_FILE:fmhpc> --help-deck optim%lr=1
            MATCH "fmhpc: --help-deck runs on its own: it takes no override")
# A bad deck fails on every rank with one message naming file:line:column.
fm_cli_test(bad_deck_np2 RC 2 CMD ${FM_MPI} 2 $<TARGET_FILE:fmhpc> --check ${FM_BAD}/bad_key.in
            MATCH "bad_key.in:5:3: &model" "n_heads" "did you mean 'n_head'"
            COUNT_RE "bad_key.in:5:3" COUNT 1)
fm_cli_test(bad_model_rule RC 2 CMD $<TARGET_FILE:fmhpc> --check ${FM_BAD}/bad_heads.in
            MATCH "bad_heads.in:4:3: &model n_head" "must divide d_model")
fm_cli_test(bad_override RC 2 CMD $<TARGET_FILE:fmhpc> --check ${FM_IN}/gpt2_nano.in optim%lrr=1e-3
            MATCH "<command line>" "lrr" "did you mean 'lr'")
# &parallel comm = 'nccl' without the CUDA backend is a clear error before any data is read.
fm_cli_test(comm_nccl_cpu RC 2 CMD $<TARGET_FILE:fmhpc> ${FM_IN}/gpt2_nano.in "parallel%comm='nccl'" "train%backend='cpu'"
            MATCH "&parallel comm = 'nccl': NCCL collectives need the CUDA backend" "hint: comm = 'auto' or 'mpi'")
# --check resolves &parallel comm as training does: the same error, and the choice printed.
fm_cli_test(comm_nccl_cpu_check RC 2 CMD $<TARGET_FILE:fmhpc> --check ${FM_IN}/gpt2_nano.in "parallel%comm='nccl'" "train%backend='cpu'"
            MATCH "&parallel comm = 'nccl': NCCL collectives need the CUDA backend" "hint: comm = 'auto' or 'mpi'")
# A build with NCCL on a node without a GPU (a login node) plans a comm = 'nccl' deck and says so.
if(FMHPC_HAVE_CUDA)
  fm_cli_test(comm_nccl_login_node_check RC 0 CMD $<TARGET_FILE:fmhpc> --check ${FM_IN}/gpt2_nano.in "parallel%comm='nccl'"
              MATCH "comm       nccl \\(asked for; this node has no usable GPU")
endif()
fm_cli_test(comm_auto_check RC 0 CMD $<TARGET_FILE:fmhpc> --check ${FM_IN}/gpt2_nano.in "train%backend='cpu'"
            MATCH "comm       mpi \\(auto: MPI")
# Every key in keys.def is read by code that acts on it (not only by --check's plan).
add_test(NAME cli.deck_keys_read COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/keys_read.py ${PROJECT_SOURCE_DIR})
set_tests_properties(cli.deck_keys_read PROPERTIES LABELS unit TIMEOUT 60)
# cmake --install, then `module load fmhpc` from the installed Tcl modulefile.
add_test(NAME cli.install_and_module COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/install.sh ${PROJECT_BINARY_DIR})
set_tests_properties(cli.install_and_module PROPERTIES LABELS unit ENVIRONMENT "${FMHPC_TEST_ENV}" TIMEOUT 120)
# Sizes that wrap int64 are refused with the limit named (they passed --check,
# printed "activations 0 B" or negative bytes, then crashed).
fm_cli_test(overflow_vocab RC 2 CMD $<TARGET_FILE:fmhpc> --check ${FM_IN}/gpt2_nano.in model%vocab_size=9223372036854775807
            MATCH "&model vocab_size = 9223372036854775807: must be <= 2\\^50 = 1125899906842624")
fm_cli_test(overflow_seq_len RC 2 CMD $<TARGET_FILE:fmhpc> --check ${FM_IN}/gpt2_nano.in model%seq_len=4600000000000000000
            MATCH "&model seq_len = 4600000000000000000: must be <= 2\\^50")
fm_cli_test(overflow_logits RC 2 CMD $<TARGET_FILE:fmhpc> --check ${FM_IN}/gpt2_nano.in model%seq_len=46000000000
            MATCH "&model seq_len = 46000000000: a micro-batch's logits \\(b x T x V\\) would hold more than 2\\^50")
# The 7B at 2^37 sequences per step: each rank would send more than 2^63 bytes over tp.
fm_cli_test(overflow_plan_bytes RC 2 CMD $<TARGET_FILE:fmhpc> --check --ranks 64 ${FM_IN}/llama2.in train%global_batch=137438953472
            MATCH "&train global_batch = 137438953472: the plan's bytes per rank or per step overflow int64"
            NOMATCH "activation sums")
fm_cli_test(overflow_layers RC 2 CMD $<TARGET_FILE:fmhpc> --check ${FM_IN}/gpt2_nano.in model%d_model=1000000000
            model%n_layer=1000000000
            MATCH "&model d_model = 1000000000: the stacked attention weights \\(L x NH\\*HS x C\\) would hold more than 2\\^50"
            NOMATCH "parameters")
# Backend choice: 'auto' says what it took and why (on these machines the CPU:
# no device, or a build without CUDA); 'cuda' for training is refused with the
# reason where no CUDA backend exists (here: this build has none; with the
# emulated backend, tests/kernels/tests.cmake's emu_* cases: a missing op).
fm_cli_test(check_backend_auto RC 0 CMD $<TARGET_FILE:fmhpc> --check ${FM_IN}/gpt2_nano.in
            MATCH "backend    cpu \\(auto: ")
fm_cli_test(train_backend_cuda_refused RC 2 CMD $<TARGET_FILE:fmhpc> ${FM_IN}/gpt2_nano.in "train%backend='cuda'"
            MATCH "train backend" "training cannot use this backend" "hint: backend = 'auto' or 'cpu'")
