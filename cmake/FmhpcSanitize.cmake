# FmhpcSanitize.cmake: the sanitized builds, each in its own build directory
# (the main gcc build is untouched). include() after FmhpcCUDA.
#   FMHPC_SANITIZE=ON  ASan + UBSan (+ LeakSanitizer, part of ASan on Linux):
#                      the unit tests and the MPI tests at 2 ranks get the
#                      ctest label asan (other labels are not registered).
#   FMHPC_FUZZ=ON      also libFuzzer harnesses (tests/fuzz, label fuzz);
#                      needs clang (CC=clang) and implies FMHPC_SANITIZE.
# CI: CC=clang cmake -S . -B build-asan -DFMHPC_CUDA=OFF -DFMHPC_FUZZ=ON
option(FMHPC_SANITIZE "ASan + UBSan build of the unit and MPI tests (ctest label asan)" OFF)
option(FMHPC_FUZZ "libFuzzer harnesses in tests/fuzz (clang; implies FMHPC_SANITIZE)" OFF)
if(FMHPC_FUZZ)
  set(FMHPC_SANITIZE ON)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "FMHPC_FUZZ needs clang (libFuzzer), not ${CMAKE_C_COMPILER_ID}.\n"
      "hint: CC=clang cmake -S . -B build-fuzz -DFMHPC_FUZZ=ON (apt-get install clang libclang-rt-14-dev libomp-dev)")
  endif()
endif()
if(FMHPC_SANITIZE)
  if(FMHPC_HAVE_CUDA)
    message(FATAL_ERROR "FMHPC_SANITIZE builds the CPU code only.\nhint: add -DFMHPC_CUDA=OFF")
  endif()
  # Every UBSan finding stops the process (exit code != 0: the test fails).
  set(FMHPC_SAN_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  if(CMAKE_C_COMPILER_ID MATCHES "Clang")
    list(APPEND FMHPC_SAN_FLAGS -Wno-pass-failed) # "loop not vectorized" notes under ASan
  endif()
  add_compile_options(${FMHPC_SAN_FLAGS})
  add_link_options(-fsanitize=address,undefined)
  if(FMHPC_FUZZ)
    # Coverage feedback for the fuzzer in every object; harnesses link libFuzzer.
    add_compile_options(-fsanitize=fuzzer-no-link)
  endif()
  # The cases that take minutes under ASan + coverage instrumentation (real
  # cl100k/o200k/r50k/p50k vocabularies, the largest float64 attention and
  # cross-entropy references) stay in the plain build only: the sanitized
  # label must fit CI's budget. Their parsers are fuzzed (tests/fuzz).
  set(FMHPC_SAN_SKIP
    "^test_tokenizer\\.(cl100k_vectors|o200k_vectors|special_tokens_only_when_asked|save_json_roundtrip_cl100k|hash_differs_between_tokenizers|invalid_utf8_roundtrip|r50k_vectors_tiktoken|p50k_vectors)$|^test_ops_attention\\.(attention_three_tiles_T150|attention_gqa_documents_T33|attention_mha_ld3C_T25)$|^test_ops_xent\\.(xent_three_chunks_ragged|xent_many_row_blocks)$")
  # Open MPI, PMIx, hwloc and HDF5 keep allocations until exit by design:
  # tests/sanitize/lsan.supp names those libraries, never fmhpc's code. Its
  # lines match any frame of a leak's stack, so stacks are unwound in full
  # (fast_unwind_on_malloc=0: the system libraries have no frame pointers, and
  # Open MPI unloads its components before the leak check, leaving only
  # libmpi's frames to name the leak).
  set(FMHPC_SAN_ENV
    "ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1"
    "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/tests/sanitize/lsan.supp:print_suppressions=0"
    "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
endif()
