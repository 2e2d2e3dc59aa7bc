# tests/errors/tests.cmake: docs/errors.md, the catalogue of fmhpc's messages,
# stays true: every message of src/ has an entry, every entry is a message of
# the code, every test named there still asserts it (catalogue.py --check).
add_test(NAME docs.errors_catalogue COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/catalogue.py --check)
set_tests_properties(docs.errors_catalogue PROPERTIES LABELS unit TIMEOUT 120)
# Bad command lines and decks, one fmhpc process each: the exit status and the
# message each must produce (the catalogue links these cases to its entries).
add_test(NAME errors.produce COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/produce.py $<TARGET_FILE:fmhpc>)
set_tests_properties(errors.produce PROPERTIES LABELS unit TIMEOUT 600)
