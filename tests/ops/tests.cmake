# tests/ops/tests.cmake: the CPU model ops against PyTorch (float64 autograd),
# run with Debian's /usr/bin/python3 (torch, numpy). The float64
# finite-difference unit tests (tests/unit/test_ops_*.c) are the primary
# check; this is the independent second reference. Without torch or numpy: a
# ctest skip (77), a failure in CI (tests/require.sh).
add_executable(ops_torch_dump ${CMAKE_CURRENT_LIST_DIR}/ops_torch_dump.c)
target_link_libraries(ops_torch_dump PRIVATE fm_test)
target_compile_options(ops_torch_dump PRIVATE ${FMHPC_C_FLAGS})
add_test(NAME ops.torch_parity
         COMMAND bash ${PROJECT_SOURCE_DIR}/tests/require.sh --py torch python3-torch --py numpy python3-numpy --
                 sh -c "d=$(mktemp -d) && $<TARGET_FILE:ops_torch_dump> \"$d\" && \
/usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/check_torch.py \"$d\"; rc=$?; rm -rf \"$d\"; exit $rc")
set_tests_properties(ops.torch_parity PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 120
                     ENVIRONMENT "OMP_NUM_THREADS=1")
