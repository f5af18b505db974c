# Every C++ and CUDA source of the repository (src, tests, python, bench,
# examples) formatted as its .clang-format says: runs
# `clang-format --dry-run -Werror` over them and fails naming each file that
# differs (clang-format prints the lines). Apply with
#   clang-format -i $(git ls-files '*.h' '*.cc' '*.cu' '*.cuh' '*.cpp')
#   cmake -DSOURCE_DIR=<repo> -DCLANG_FORMAT=<clang-format> -P cmake/check_format.cmake
if(NOT SOURCE_DIR OR NOT CLANG_FORMAT)
  message(FATAL_ERROR "check_format: set SOURCE_DIR to the repository and CLANG_FORMAT")
endif()
set(files "")
foreach(folder src tests python bench examples)
  foreach(extension h cc cu cuh cpp)
    file(GLOB_RECURSE found ${SOURCE_DIR}/${folder}/*.${extension})
    list(APPEND files ${found})
  endforeach()
endforeach()
list(LENGTH files count)
if(count EQUAL 0)
  message(FATAL_ERROR "check_format: no sources under ${SOURCE_DIR}")
endif()
list(SORT files)
execute_process(COMMAND ${CLANG_FORMAT} --dry-run -Werror --style=file ${files}
                WORKING_DIRECTORY ${SOURCE_DIR} RESULT_VARIABLE status
                ERROR_VARIABLE diagnostics)
if(NOT status EQUAL 0)
  string(REGEX MATCHALL "[^\n]*: error: code should be clang-formatted" lines "${diagnostics}")
  set(named "")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE ":[0-9]+:[0-9]+: error: code should be clang-formatted" "" file "${line}")
    list(APPEND named ${file})
  endforeach()
  list(REMOVE_DUPLICATES named)
  list(LENGTH named failed)
  list(JOIN named "\n  " named)
  message(NOTICE "${diagnostics}\ncheck_format: not formatted as .clang-format says (run "
                 "clang-format -i on them):\n  ${named}")
  message(FATAL_ERROR "check_format: ${failed} of ${count} files not formatted")
endif()
message(STATUS "check_format: ${count} files formatted")
