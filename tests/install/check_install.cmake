# Installs the build into a scratch prefix, then configures, builds and runs
# examples/ as a separate project that finds tandem with find_package().
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix
                RESULT_VARIABLE status OUTPUT_QUIET)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "cmake --install failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples -B ${WORK_DIR}/build -G Ninja
                        -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release
                RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "configuring examples against the installed package failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "building examples against the installed package failed")
endif()
execute_process(COMMAND ${WORK_DIR}/build/xor_mlp RESULT_VARIABLE status OUTPUT_VARIABLE out)
message(STATUS "${out}")
if(NOT status EQUAL 0)
  message(FATAL_ERROR "the example linked against the installed library failed")
endif()
