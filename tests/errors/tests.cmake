# tests/errors/tests.cmake: docs/errors.md, the catalogue of fmhpc's messages,
# stays true: every message of src/ has an entry, every entry is a message of
# the code, every test named there still asserts it, and every message has a
# test or a reason in no_test.txt (catalogue.py --check).
add_test(NAME docs.errors_catalogue COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/catalogue.py --check)
set_tests_properties(docs.errors_catalogue PROPERTIES LABELS unit TIMEOUT 120)
# Bad command lines, decks and files, one fmhpc process each: the exit status
# and the message each must produce (the catalogue links these cases to its
# entries). One test per group of produce.py, so that they run in parallel.
foreach(group cli deck tasks tokenizer data interop store ckpt models)
  add_test(NAME errors.produce_${group}
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/produce.py $<TARGET_FILE:fmhpc> ${group})
  set_tests_properties(errors.produce_${group} PROPERTIES LABELS unit TIMEOUT 300)
endforeach()
