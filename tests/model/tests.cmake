# tests/model: the model's forward and backward against references written
# outside fmhpc. model_dump (one forward + backward of a tiny GPT-2 or Llama)
# feeds ref_models.py, a torch.nn transcription of the HF modeling files run
# in float32 (parity) and float64 (fmhpc's whole error), both within 1e-5.
# Where torch is missing: a ctest skip (77), a failure in CI (tests/oracle.py). The FM_TEST cases (gradients vs
# finite differences, bitwise promises, init) are tests/unit/test_model_fwd_bwd.c.
set(FMHPC_TORCH_PYTHON /usr/bin/python3 CACHE FILEPATH "Python with torch for reference tests")
add_executable(model_dump ${CMAKE_CURRENT_LIST_DIR}/model_dump.c)
target_link_libraries(model_dump PRIVATE fmhpc_lib)
target_compile_options(model_dump PRIVATE ${FMHPC_C_FLAGS})
foreach(cfg "gpt2;1" "gpt2;0" "llama;0" "llama;1")
  list(GET cfg 0 arch)
  list(GET cfg 1 tied)
  add_test(NAME model.torch_parity.${arch}_tied${tied}
           COMMAND ${FMHPC_TORCH_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/ref_models.py $<TARGET_FILE:model_dump>
                   ${PROJECT_BINARY_DIR}/tests/model_ref ${arch} ${tied})
  set_tests_properties(model.torch_parity.${arch}_tied${tied} PROPERTIES SKIP_RETURN_CODE 77 LABELS unit
                       ENVIRONMENT "OMP_NUM_THREADS=1" TIMEOUT 120)
endforeach()
# 10 AdamW steps from the same weights and batches: every loss within 1e-5 of PyTorch.
add_executable(adamw_steps ${CMAKE_CURRENT_LIST_DIR}/adamw_steps.c)
target_link_libraries(adamw_steps PRIVATE fmhpc_lib)
target_compile_options(adamw_steps PRIVATE ${FMHPC_C_FLAGS})
foreach(arch gpt2 llama)
  add_test(NAME model.torch_adamw_steps.${arch}
           COMMAND ${FMHPC_TORCH_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/adamw_steps.py $<TARGET_FILE:adamw_steps>
                   ${PROJECT_BINARY_DIR}/tests/model_ref ${arch} 0)
  set_tests_properties(model.torch_adamw_steps.${arch} PROPERTIES LABELS unit ENVIRONMENT "OMP_NUM_THREADS=1"
                       TIMEOUT 120 SKIP_RETURN_CODE 77)
endforeach()
