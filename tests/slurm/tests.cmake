# tests/slurm: a real Slurm cluster on this machine (ctest label slurm).
# slurm.cluster_up starts a private munged, slurmctld and 2 slurmd (virtual
# nodes n1, n2), all state under the build tree; slurm.cluster_down stops
# exactly those daemons. Between them slurm/train_nano.sh is submitted with
# sbatch on the linux-doc corpus of the reg_data fixture (regression/):
# plain, preempted with scancel --signal=USR1 (checkpoint, requeue, same bits
# as the uninterrupted run), and on 2 nodes over TCP (same bits as on 1 node).
# Every case skips (77) only where slurmctld or munged is not installed, and
# fails then in CI (CI=true, tests/oracle.sh); each passes on its exit status.
#   ctest --test-dir build -L slurm
set(FM_SLURM_DIR ${PROJECT_BINARY_DIR}/tests/slurm)
set(FM_SLURM_CLUSTER ${FM_SLURM_DIR}/cluster)
set(FM_SLURM_DATA ${PROJECT_BINARY_DIR}/regression/work)   # regression.prep_nano writes it (reg_data)
add_test(NAME slurm.cluster_up COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cluster-up.sh ${FM_SLURM_CLUSTER} 2)
set_tests_properties(slurm.cluster_up PROPERTIES FIXTURES_SETUP slurm_cluster LABELS slurm TIMEOUT 120
                     SKIP_RETURN_CODE 77)
add_test(NAME slurm.cluster_down COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cluster-down.sh ${FM_SLURM_CLUSTER})
set_tests_properties(slurm.cluster_down PROPERTIES FIXTURES_CLEANUP slurm_cluster LABELS slurm TIMEOUT 120
                     SKIP_RETURN_CODE 77)
# sbatch_nano's run is the reference of the other two (fixture slurm_ref).
foreach(case sbatch_nano preempt_requeue two_nodes)
  add_test(NAME slurm.${case}
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/slurm_case.sh ${case} $<TARGET_FILE:fmhpc> ${FM_SLURM_CLUSTER}
                   ${PROJECT_SOURCE_DIR} ${FM_SLURM_DATA} ${FM_SLURM_DIR}/work)
  set_tests_properties(slurm.${case} PROPERTIES LABELS slurm TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${FMHPC_TEST_ENV}"
                       PROCESSORS 2 RUN_SERIAL ON)
endforeach()
set_tests_properties(slurm.sbatch_nano PROPERTIES FIXTURES_REQUIRED "slurm_cluster;reg_data" FIXTURES_SETUP slurm_ref)
set_tests_properties(slurm.preempt_requeue slurm.two_nodes PROPERTIES
                     FIXTURES_REQUIRED "slurm_cluster;reg_data;slurm_ref")
# regression/suite.sh --short submitted as a centre would (sbatch --nodes=2): dp 2
# across the virtual nodes with the same bits as on one node, tp 2 x dp 2 once tp lands.
add_test(NAME slurm.suite_short
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/suite_case.sh $<TARGET_FILE:fmhpc> ${FM_SLURM_CLUSTER}
                 ${PROJECT_SOURCE_DIR} ${FM_SLURM_DIR}/work)
set_tests_properties(slurm.suite_short PROPERTIES LABELS slurm TIMEOUT 600 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${FMHPC_TEST_ENV}" PROCESSORS 2 RUN_SERIAL ON FIXTURES_REQUIRED slurm_cluster)
