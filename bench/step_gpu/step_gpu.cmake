# bench/step_gpu: the training step on the CUDA backend with its per-op
# profile (bench_step_gpu.c). Included from tests/kernels/tests.cmake (it
# needs the emulated kernel table fm_simt_kernels): bench_step_gpu on the real
# CUDA table (regression/gpu/check.sh runs it on a GPU; it exits 77 without
# one) and bench_step_gpu_emu on the SIMT emulator's, which ctest runs at a
# tiny shape (label emu) so the bench itself is exercised in CI.
set(FM_STEP_GPU ${PROJECT_SOURCE_DIR}/bench/step_gpu/bench_step_gpu.c)
add_executable(bench_step_gpu ${FM_STEP_GPU})
target_compile_options(bench_step_gpu PRIVATE ${FMHPC_C_FLAGS})
target_link_libraries(bench_step_gpu PRIVATE fmhpc_lib)
if(FMHPC_HAVE_CUDA)
  set_target_properties(bench_step_gpu PROPERTIES LINKER_LANGUAGE CUDA)
endif()
add_executable(bench_step_gpu_emu ${FM_STEP_GPU})
target_compile_definitions(bench_step_gpu_emu PRIVATE BENCH_EMU)
target_compile_options(bench_step_gpu_emu PRIVATE ${FMHPC_C_FLAGS})
target_include_directories(bench_step_gpu_emu PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/kernels/emu)
target_link_libraries(bench_step_gpu_emu PRIVATE fmhpc_lib fm_simt_kernels)
set_target_properties(bench_step_gpu_emu PROPERTIES LINKER_LANGUAGE CXX)
# A tiny Llama (GQA) in bf16 with recompute: every model op of the device
# path is wrapped and timed; the run must print the step line and the
# profile's bound line and cover most of the step with named ops.
add_test(NAME bench.step_gpu_emu
         COMMAND bash ${PROJECT_SOURCE_DIR}/bench/step_gpu/check_emu.sh $<TARGET_FILE:bench_step_gpu_emu>)
set_tests_properties(bench.step_gpu_emu PROPERTIES LABELS emu ENVIRONMENT "${FMHPC_TEST_ENV}" TIMEOUT 300)
