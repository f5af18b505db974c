# The Python package (python/, docs/python.md): Debian's python3-dev,
# pybind11-dev and libdlpack-dev. AUTO builds it when they are found.
if(TANDEM_BUILD_PYTHON STREQUAL "OFF")
  return()
endif()
set(PYBIND11_FINDPYTHON ON)
# Debian's interpreter (its numpy and pytest are the ones the package and
# tests use), not whatever python3 comes first on PATH.
if(NOT Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
  set(Python3_EXECUTABLE /usr/bin/python3)
endif()
find_package(Python3 COMPONENTS Interpreter Development.Module)
find_package(pybind11 CONFIG QUIET)
find_path(TANDEM_DLPACK_INCLUDE dlpack/dlpack.h)
if(NOT Python3_FOUND OR NOT pybind11_FOUND OR NOT TANDEM_DLPACK_INCLUDE)
  if(TANDEM_BUILD_PYTHON STREQUAL "ON")
    message(FATAL_ERROR "TANDEM_BUILD_PYTHON=ON needs python3-dev, pybind11-dev and libdlpack-dev")
  endif()
  message(STATUS "tandem: Python package off (python3-dev, pybind11-dev or libdlpack-dev missing)")
  return()
endif()
# Where `cmake --install` puts the package, under the install prefix:
# Debian's Python looks in /usr/local/lib/python3.N/dist-packages.
set(TANDEM_PYTHON_INSTALL_DIR lib/python3.${Python3_VERSION_MINOR}/dist-packages CACHE STRING
    "Where the Python package is installed, relative to CMAKE_INSTALL_PREFIX")
add_subdirectory(python)
