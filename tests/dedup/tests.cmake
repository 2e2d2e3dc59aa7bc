# tests/dedup/tests.cmake: task='dedup' end to end on the WordNet SFT fixture
# (tests/data: data_fx) plus planted near-duplicates at known exact Jaccard and
# planted dirty records; runs inputs/dedup.in at 1 and 3 ranks and checks the
# outputs are byte-identical, the planted copies are dropped or kept by their
# exact similarity, every filter count, and the estimates against a Python
# oracle of exact char-3-gram Jaccard. Prints records/s.
add_test(NAME dedup.wordnet_planted
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/dedup_case.py $<TARGET_FILE:fmhpc> ${MPIEXEC_EXECUTABLE}
                 ${PROJECT_SOURCE_DIR}/inputs/dedup.in ${PROJECT_BINARY_DIR}/tests/data/fixtures/wordnet_sft.jsonl
                 ${PROJECT_BINARY_DIR}/tests/dedup/work)
set_tests_properties(dedup.wordnet_planted PROPERTIES FIXTURES_REQUIRED data_fx LABELS unit TIMEOUT 300
                     ENVIRONMENT "${FMHPC_TEST_ENV}")
