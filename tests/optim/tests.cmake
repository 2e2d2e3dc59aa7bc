# tests/optim: optimizers and schedules against torch 1.13. The fixture runs
# torch_ref.py into tests/optim_ref/ (without torch: exit 77, skipped, or a
# failure in CI); the FM_TEST cases of test_optim_torch.c read what it wrote.
set(FMHPC_TORCH_PYTHON /usr/bin/python3 CACHE FILEPATH "Python with torch for reference tests")
add_test(NAME optim.torch_ref
         COMMAND ${FMHPC_TORCH_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/torch_ref.py ${PROJECT_BINARY_DIR}/tests/optim_ref)
set_tests_properties(optim.torch_ref PROPERTIES FIXTURES_SETUP optim_torch SKIP_RETURN_CODE 77 LABELS unit
                     ENVIRONMENT "OMP_NUM_THREADS=1" TIMEOUT 300)
fm_add_test_file(${CMAKE_CURRENT_LIST_DIR}/test_optim_torch.c)
file(STRINGS ${CMAKE_CURRENT_LIST_DIR}/test_optim_torch.c optim_torch_cases REGEX "^FM_TEST\\([A-Za-z0-9_]+\\)")
foreach(line IN LISTS optim_torch_cases)
  string(REGEX REPLACE "^FM_TEST\\(([A-Za-z0-9_]+)\\).*" "\\1" case "${line}")
  set_tests_properties(test_optim_torch.${case} PROPERTIES FIXTURES_REQUIRED optim_torch)
endforeach()
