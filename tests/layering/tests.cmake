# tests/layering/tests.cmake: DESIGN section 2's module rule. Reads every
# #include under src/ and include/fmhpc/ and fails on a module that includes a
# header of a module at or above its level, or another module's private header.
add_test(NAME layering.includes
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/check_includes.py ${PROJECT_SOURCE_DIR})
set_tests_properties(layering.includes PROPERTIES LABELS unit TIMEOUT 60)
