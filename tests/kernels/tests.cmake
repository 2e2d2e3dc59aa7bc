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

file(GLOB emu_tests CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/kernels/emu/test_*.c)
foreach(t IN LISTS emu_tests)
  fm_add_test_file(${t} LABEL emu LIBS fm_simt_kernels)
  get_filename_component(base ${t} NAME_WE)
  set_target_properties(${base} PROPERTIES LINKER_LANGUAGE CXX)
endforeach()
