# tests/generate: task='generate' end to end (tests/generate/run.sh): a tiny
# exported GPT-2, greedy and sampled text byte-for-byte equal at 1 and 2
# ranks. The decode-vs-full-forward and sampler cases are
# tests/unit/test_generate.c.
add_test(NAME generate.ranks_same_text
         COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/run.sh $<TARGET_FILE:fmhpc> $<TARGET_FILE:hf_tool> ${MPIEXEC_EXECUTABLE}
                 ${PROJECT_BINARY_DIR}/tests/generate_run ${PROJECT_SOURCE_DIR})
set_tests_properties(generate.ranks_same_text PROPERTIES LABELS regression ENVIRONMENT "${FMHPC_TEST_ENV}"
                     TIMEOUT 300)
