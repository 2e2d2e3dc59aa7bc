# tests/kernels/tests.cmake: the emulated kernel tests (ctest label `emu`).
# Every kernel file of src/tensor/cuda/ (the device sources nvcc compiles into
# the library) is compiled a second time as C++ with -DFM_SIMT against the host
# SIMT emulator (src/tensor/cuda/emu), so CI runs each kernel on small shapes
# under several thread schedules without a GPU. memory.cu is left out: it is
# the CUDA runtime itself (the emulated ops take host pointers). These tests
# need no nvcc and run in every build. tests/kernels/test_*.c (label gpu) runs
# the same ops on a real device.
enable_language(CXX)

set(FM_SIMT_DIR ${PROJECT_SOURCE_DIR}/src/tensor/cuda)
add_library(fm_simt STATIC ${FM_SIMT_DIR}/emu/simt.cpp)
target_include_directories(fm_simt PUBLIC ${FM_SIMT_DIR})
set_target_properties(fm_simt PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF)
set(FM_SIMT_CXX_FLAGS -Wall -Wextra -Wshadow -Wno-unused-parameter -ffp-contract=off)
if(FMHPC_WERROR)
  list(APPEND FM_SIMT_CXX_FLAGS -Werror)
endif()
target_compile_options(fm_simt PRIVATE ${FM_SIMT_CXX_FLAGS} -O2)

# One C++ file per .cu that includes it: what g++ -x c++ -DFM_SIMT does.
file(GLOB fm_simt_cu CONFIGURE_DEPENDS ${FM_SIMT_DIR}/*.cu ${CMAKE_CURRENT_SOURCE_DIR}/kernels/emu/*.cu)
list(FILTER fm_simt_cu EXCLUDE REGEX "/memory\\.cu$")
set(fm_simt_wrappers)
foreach(cu IN LISTS fm_simt_cu)
  get_filename_component(name ${cu} NAME_WE)
  set(wrapper ${CMAKE_CURRENT_BINARY_DIR}/simt/${name}.cu.cpp)
  file(CONFIGURE OUTPUT ${wrapper} CONTENT "#include \"${cu}\"\n" @ONLY)
  list(APPEND fm_simt_wrappers ${wrapper})
endforeach()
add_library(fm_simt_kernels STATIC ${fm_simt_wrappers})
target_compile_definitions(fm_simt_kernels PRIVATE FM_SIMT)
target_include_directories(fm_simt_kernels PRIVATE ${PROJECT_SOURCE_DIR}/include ${FM_SIMT_DIR})
target_compile_options(fm_simt_kernels PRIVATE ${FM_SIMT_CXX_FLAGS} -O1)
set_target_properties(fm_simt_kernels PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF)
target_link_libraries(fm_simt_kernels PUBLIC fm_simt)

# fm_nccl_emu: the CUDA runtime calls and NCCL collectives of kernels/emu/fake/
# on host memory over MPI (nccl_emu.c), and src/runtime/comm_nccl.c compiled a
# second time with FMHPC_HAVE_CUDA against those headers, so that its bootstrap,
# ops and error paths run here. An OBJECT library: its objects go into each
# program directly and replace fmhpc_lib's comm_nccl.o (the stubs of a build
# without CUDA, or the real NCCL one) in fmhpc_emu and the tests below.
set(FM_EMU_FAKE ${CMAKE_CURRENT_SOURCE_DIR}/kernels/emu/fake)
add_library(fm_nccl_emu OBJECT ${CMAKE_CURRENT_SOURCE_DIR}/kernels/emu/nccl_emu.c
                               ${PROJECT_SOURCE_DIR}/src/runtime/comm_nccl.c)
target_include_directories(fm_nccl_emu BEFORE PRIVATE ${FM_EMU_FAKE})
target_compile_definitions(fm_nccl_emu PRIVATE FMHPC_HAVE_CUDA=1)
target_compile_options(fm_nccl_emu PRIVATE ${FMHPC_C_FLAGS})
target_link_libraries(fm_nccl_emu PRIVATE fmhpc_lib)

file(GLOB emu_tests CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/kernels/emu/test_*.c)
list(FILTER emu_tests EXCLUDE REGEX "/test_emu_(nccl|reduce)\\.c$")
# Every FmComm op over the emulated NCCL against the MPI communicator, bitwise,
# at 1, 2 and 4 ranks; the error paths; the mesh's NCCL communicators.
fm_add_test_file(${CMAKE_CURRENT_SOURCE_DIR}/kernels/emu/test_emu_nccl.c MPI NP 1 2 4 LABEL emu LIBS fm_nccl_emu)
target_include_directories(test_emu_nccl BEFORE PRIVATE ${FM_EMU_FAKE})
# The exact reduction's exchange on the device (quant_add, NCCL, dequant) against the host path over MPI.
fm_add_test_file(${CMAKE_CURRENT_SOURCE_DIR}/kernels/emu/test_emu_reduce.c MPI NP 1 2 4 LABEL emu
                 LIBS fm_simt_kernels fm_nccl_emu)
set_target_properties(test_emu_reduce PROPERTIES LINKER_LANGUAGE CXX)
# The GPU test of comm_nccl.c (label gpu) itself, on the emulated device.
add_executable(test_cuda_nccl_emu ${CMAKE_CURRENT_SOURCE_DIR}/kernels/test_cuda_nccl.c
                                  ${CMAKE_CURRENT_SOURCE_DIR}/fm_test_main.c)
target_include_directories(test_cuda_nccl_emu BEFORE PRIVATE ${FM_EMU_FAKE})
target_compile_definitions(test_cuda_nccl_emu PRIVATE FMHPC_HAVE_CUDA=1)
target_compile_options(test_cuda_nccl_emu PRIVATE ${FMHPC_C_FLAGS})
target_link_libraries(test_cuda_nccl_emu PRIVATE fm_test fm_nccl_emu)
add_test(NAME test_cuda_nccl_emu.nccl_one_rank_every_op COMMAND test_cuda_nccl_emu nccl_one_rank_every_op)
set_tests_properties(test_cuda_nccl_emu.nccl_one_rank_every_op PROPERTIES LABELS emu ENVIRONMENT "${FMHPC_TEST_ENV}"
                     SKIP_RETURN_CODE 77)
foreach(t IN LISTS emu_tests)
  fm_add_test_file(${t} LABEL emu LIBS fm_simt_kernels)
  get_filename_component(base ${t} NAME_WE)
  set_target_properties(${base} PROPERTIES LINKER_LANGUAGE CXX)
endforeach()

# fmhpc_emu: the fmhpc executable whose backend 'cuda' is the emulated kernel
# table above (tests only; FMHPC_EMU_SCHEDULE picks the thread order). The
# training runs of tests/kernels/emu_train.sh drive it through task='train'.
file(CONFIGURE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/simt/fmhpc_main.c
     CONTENT "#define main fmhpc_main\n#include \"${PROJECT_SOURCE_DIR}/src/main.c\"\n" @ONLY)
add_executable(fmhpc_emu ${CMAKE_CURRENT_SOURCE_DIR}/kernels/emu/fmhpc_emu.c ${CMAKE_CURRENT_BINARY_DIR}/simt/fmhpc_main.c)
target_compile_options(fmhpc_emu PRIVATE ${FMHPC_C_FLAGS})
target_include_directories(fmhpc_emu PRIVATE ${FM_SIMT_DIR})
target_link_libraries(fmhpc_emu PRIVATE fmhpc_lib fm_simt_kernels fm_nccl_emu)
set_target_properties(fmhpc_emu PROPERTIES LINKER_LANGUAGE CXX)
set(FM_EMU_TRAIN_WORK ${PROJECT_BINARY_DIR}/tests/kernels/emu_train)
foreach(case IN ITEMS data llama gpt2 llama_bf16 paths plans oom traffic nccl_shards gpubind fast_nccl sync)
  add_test(NAME emu.train_${case}
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/emu_train.sh ${case} $<TARGET_FILE:fmhpc>
                   $<TARGET_FILE:fmhpc_emu> ${MPIEXEC_EXECUTABLE} ${PROJECT_BINARY_DIR}/tests/data/fixtures
                   ${FM_EMU_TRAIN_WORK})
  set_tests_properties(emu.train_${case} PROPERTIES LABELS emu TIMEOUT 300 ENVIRONMENT "${FMHPC_TEST_ENV}"
                       PROCESSORS 2)
  if(case STREQUAL "data")
    set_tests_properties(emu.train_${case} PROPERTIES FIXTURES_SETUP emu_train_data FIXTURES_REQUIRED data_fx)
  else()
    set_tests_properties(emu.train_${case} PROPERTIES FIXTURES_REQUIRED emu_train_data)
  endif()
endforeach()
# The backend choice with a CUDA backend present (the emulated one): 'auto'
# takes it when it has every op the run needs, else the CPU with the missing
# op named; 'cuda' without a needed op is refused, naming it.
set(FM_EMU_DROP ${CMAKE_COMMAND} -E env FMHPC_EMU_DROP_OP=rope_fwd $<TARGET_FILE:fmhpc_emu>)
fm_cli_test(emu_check_auto_cuda RC 0 CMD $<TARGET_FILE:fmhpc_emu> --check ${FM_IN}/gpt2_nano.in
            MATCH "backend    cuda \\(emulated\\) \\(auto: a CUDA device is usable and its build has every op the run needs\\)")
fm_cli_test(emu_check_auto_missing_op RC 0 CMD ${FM_EMU_DROP} --check ${FM_IN}/llama_nano.in
            MATCH "backend    cpu \\(auto: a CUDA device is usable, but the cuda \\(emulated\\) build has no rope_fwd op")
fm_cli_test(emu_train_cuda_missing_op RC 2 CMD ${FM_EMU_DROP} ${FM_IN}/llama_nano.in "train%backend='cuda'"
            MATCH "training cannot use this backend: the cuda \\(emulated\\) build has no rope_fwd op"
                  "hint: backend = 'auto' or 'cpu'")
# c=bf16 needs set_compute_bf16 (the bf16 GEMM path): without it auto keeps
# the run on the CPU, naming the op; with it (the table as built) auto takes CUDA.
fm_cli_test(emu_check_auto_bf16 RC 0 CMD ${CMAKE_COMMAND} -E env FMHPC_EMU_DROP_OP=set_compute_bf16
            $<TARGET_FILE:fmhpc_emu> --check ${FM_IN}/llama_nano.in "train%precision='p=f32,c=bf16'"
            MATCH "backend    cpu \\(auto: a CUDA device is usable, but the cuda \\(emulated\\) build has no set_compute_bf16 op")
fm_cli_test(emu_check_auto_bf16_cuda RC 0 CMD $<TARGET_FILE:fmhpc_emu> --check ${FM_IN}/llama_nano.in
            "train%precision='p=f32,c=bf16'"
            MATCH "backend    cuda \\(emulated\\) \\(auto: a CUDA device is usable and its build has every op the run needs\\)")
set_tests_properties(cli.emu_check_auto_cuda cli.emu_check_auto_missing_op cli.emu_train_cuda_missing_op
                     cli.emu_check_auto_bf16 cli.emu_check_auto_bf16_cuda PROPERTIES LABELS emu)
include(${PROJECT_SOURCE_DIR}/bench/step_gpu/step_gpu.cmake)
