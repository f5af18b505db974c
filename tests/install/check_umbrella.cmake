# tandem/tandem.h includes every installed public header (not detail/, cli/
# or cuda/), but the internal ones listed here: a list that mirrors the code,
# checked against it.
set(internal
    tandem/tandem.h
    tandem/base/atomic_file.h tandem/base/environment.h tandem/base/host_name.h tandem/base/memory_bandwidth.h
    tandem/base/parse_number.h
    tandem/base/shared_library.h
    tandem/base/statistics.h tandem/base/target_clones.h tandem/base/text_file.h
    tandem/base/utf8.h tandem/data/crc32c.h tandem/tensor/device_memory.h
    tandem/distribute/parameter_server_processes.h tandem/distribute/variable_partition.h
    tandem/distribute/sharded_optimizer.h tandem/nn/graph_builder.h)
file(READ ${SOURCE_DIR}/src/tandem/tandem.h umbrella)
file(GLOB_RECURSE headers RELATIVE ${SOURCE_DIR}/src ${SOURCE_DIR}/src/tandem/*.h)
set(missing "")
foreach(header IN LISTS headers)
  if(header MATCHES "/detail/" OR header MATCHES "^tandem/cli/" OR header MATCHES "/cuda/")
    continue()
  endif()
  list(FIND internal ${header} at)
  if(NOT at EQUAL -1)
    continue()
  endif()
  string(FIND "${umbrella}" "#include \"${header}\"" found)
  if(found EQUAL -1)
    list(APPEND missing ${header})
  endif()
endforeach()
if(missing)
  message(FATAL_ERROR "tandem/tandem.h does not include: ${missing} (include them, or list them "
                      "as internal in tests/install/check_umbrella.cmake)")
endif()
