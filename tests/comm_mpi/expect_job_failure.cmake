# Runs COMMAND (a ;-list) and passes when it ends with a non-zero status within
# LIMIT seconds and its output matches PATTERN: a dead rank must end the job
# with a clear message rather than hang it.
string(TIMESTAMP start "%s")
execute_process(COMMAND ${COMMAND} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err
                TIMEOUT ${LIMIT})
string(TIMESTAMP finish "%s")
math(EXPR seconds "${finish} - ${start}")
message(STATUS "exit status: ${status} after ${seconds} s\n${out}\n${err}")
if(status STREQUAL "0")
  message(FATAL_ERROR "the job succeeded although a rank was killed")
endif()
if(status MATCHES "timeout")
  message(FATAL_ERROR "the job hung for ${LIMIT} s after a rank was killed")
endif()
if(NOT "${out}${err}" MATCHES "${PATTERN}")
  message(FATAL_ERROR "no message matching '${PATTERN}' about the dead rank")
endif()
