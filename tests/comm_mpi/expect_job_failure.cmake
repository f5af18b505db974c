# Runs COMMAND (a ;-list) and passes when it ends with a non-zero status within
# LIMIT seconds, its output matches every regular expression of PATTERNS (a
# ;-list), and no process of PROGRAM (when given) is left running: a failed
# or dead rank must end the whole job with a clear message rather than hang it.
# ANY_STATUS (when true) accepts status 0: Open MPI 4.1's mpirun
# --enable-recovery exits 0 after a rank's MPI_Abort has ended the job.
string(TIMESTAMP start "%s")
execute_process(COMMAND ${COMMAND} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err
                TIMEOUT ${LIMIT})
string(TIMESTAMP finish "%s")
math(EXPR seconds "${finish} - ${start}")
message(STATUS "exit status: ${status} after ${seconds} s\n${out}\n${err}")
if(status STREQUAL "0" AND NOT ANY_STATUS)
  message(FATAL_ERROR "the job succeeded although a rank failed")
endif()
if(status MATCHES "timeout")
  message(FATAL_ERROR "the job hung for ${LIMIT} s after a rank failed")
endif()
foreach(pattern IN LISTS PATTERNS)
  if(NOT "${out}${err}" MATCHES "${pattern}")
    message(FATAL_ERROR "no message matching '${pattern}'")
  endif()
endforeach()
if(PROGRAM)
  # mpirun has returned: any process of the program still there was left behind.
  execute_process(COMMAND pgrep -a -f -- "^${PROGRAM}" OUTPUT_VARIABLE left RESULT_VARIABLE none)
  if(none STREQUAL "0")
    execute_process(COMMAND pkill -KILL -f -- "^${PROGRAM}")
    message(FATAL_ERROR "processes left behind after the job ended: ${left}")
  endif()
endif()
