# tests/interop: Hugging Face import/export checked from Python with an
# independent safetensors reader/writer (st_ref.py) and HF's names and
# layouts stated independently (check_hf.py). Label unit.
add_executable(hf_tool ${CMAKE_CURRENT_LIST_DIR}/hf_tool.c)
target_link_libraries(hf_tool PRIVATE fmhpc_lib)
target_compile_options(hf_tool PRIVATE ${FMHPC_C_FLAGS})
foreach(case export_gpt2_tied export_gpt2_untied export_llama_gqa export_llama_tied import_gpt2_f32
        import_gpt2_f16_base_model_names import_gpt2_bf16_untied import_llama_bf16_sharded import_llama_f16_tied
        import_config_mismatch import_rope_scaling_unsupported import_integer_weight import_offsets_lie export_task)
  add_test(NAME interop.hf.${case}
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/check_hf.py ${case} $<TARGET_FILE:hf_tool>
                   $<TARGET_FILE:fmhpc> ${CMAKE_CURRENT_BINARY_DIR}/interop_work)
  set_tests_properties(interop.hf.${case} PROPERTIES LABELS unit ENVIRONMENT "${FMHPC_TEST_ENV}" TIMEOUT 120)
endforeach()
# The fixtures the GPU check hands to transformers (regression/gpu/hf_fixtures.sh:
# hf_tool export-init and logits) against tests/model/ref_models.py in float64.
add_test(NAME interop.hf.logits_vs_ref
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/check_logits.py $<TARGET_FILE:hf_tool> ${PROJECT_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/interop_work)
set_tests_properties(interop.hf.logits_vs_ref PROPERTIES LABELS unit ENVIRONMENT "${FMHPC_TEST_ENV}" TIMEOUT 120
                     SKIP_RETURN_CODE 77)
