# Installs the build into a scratch prefix, runs the installed tandem
# command, then configures, builds and runs examples/ as a separate project
# that finds tandem with find_package(): in the prefix, and in the build
# tree (tandem_DIR) without installing.
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix
                RESULT_VARIABLE status OUTPUT_QUIET)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "cmake --install failed")
endif()
# The installed command starts (it finds the installed library: RPATH).
execute_process(COMMAND ${WORK_DIR}/prefix/bin/tandem --version RESULT_VARIABLE status
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT status EQUAL 0 OR NOT out MATCHES "^tandem ")
  message(FATAL_ERROR "the installed tandem command does not start: ${out}${err}")
endif()
# The examples as a consumer project, against `package` (a -D setting).
function(build_examples name package)
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples -B ${WORK_DIR}/${name} -G Ninja
                          ${package} -DCMAKE_BUILD_TYPE=Release
                  RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "configuring examples against the ${name} package failed")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/${name} RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "building examples against the ${name} package failed")
  endif()
  execute_process(COMMAND ${WORK_DIR}/${name}/xor_mlp RESULT_VARIABLE status OUTPUT_VARIABLE out)
  message(STATUS "${out}")
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "the example linked against the ${name} package failed")
  endif()
endfunction()
build_examples(installed -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
build_examples(build_tree -Dtandem_DIR=${BUILD_DIR})
