# expect.cmake: run one command and check what it did. Used by the CLI tests:
#   cmake -DCMD="a;b;c" -DRC=<exit status> [-DMATCH="re1;re2"] [-DNOMATCH=re]
#         [-DCOUNT_RE=re -DCOUNT=n] -P expect.cmake
# MATCH regexes must all appear in stdout+stderr; COUNT_RE must match exactly
# COUNT times (e.g. one plan printed by rank 0 of 4).
execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(all "${out}${err}")
set(fail "")
if(NOT "${rc}" STREQUAL "${RC}")
  string(APPEND fail "exit status ${rc}, expected ${RC}\n")
endif()
foreach(re IN LISTS MATCH)
  if(NOT all MATCHES "${re}")
    string(APPEND fail "output lacks /${re}/\n")
  endif()
endforeach()
if(DEFINED NOMATCH AND all MATCHES "${NOMATCH}")
  string(APPEND fail "output has /${NOMATCH}/\n")
endif()
if(DEFINED COUNT_RE)
  string(REGEX MATCHALL "${COUNT_RE}" hits "${all}")
  list(LENGTH hits n)
  if(NOT n EQUAL COUNT)
    string(APPEND fail "/${COUNT_RE}/ appears ${n} times, expected ${COUNT}\n")
  endif()
endif()
if(fail)
  message(FATAL_ERROR "command: ${CMD}\n${fail}--- output ---\n${all}")
endif()
