# Sets OPTIMATE_NANOBIND_FOUND when the Python interpreter CMake finds (Python_EXECUTABLE, as
# scikit-build-core and scripts/setup.sh pass it) has nanobind and development headers.
set(OPTIMATE_NANOBIND_FOUND OFF)
find_package(Python 3.9 COMPONENTS Interpreter Development.Module QUIET)
if(Python_FOUND)
  execute_process(COMMAND "${Python_EXECUTABLE}" -m nanobind --cmake_dir
                  OUTPUT_VARIABLE _nanobind_dir OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE _nanobind_rc ERROR_QUIET)
  if(_nanobind_rc EQUAL 0 AND EXISTS "${_nanobind_dir}")
    list(APPEND CMAKE_PREFIX_PATH "${_nanobind_dir}")
    set(OPTIMATE_NANOBIND_FOUND ON)
  endif()
endif()
