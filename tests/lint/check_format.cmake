# cmake -DCLANG_FORMAT=<exe> -DROOT=<source dir> -P check_format.cmake
# Fails when a C++ source of weft differs from what .clang-format makes of it. The
# file list is taken when the test runs, so a new file is checked without re-configuring.
file(GLOB_RECURSE sources LIST_DIRECTORIES false RELATIVE "${ROOT}"
     "${ROOT}/include/*.hpp" "${ROOT}/src/*.hpp" "${ROOT}/src/*.cpp" "${ROOT}/io/*.hpp" "${ROOT}/io/*.cpp"
     "${ROOT}/bench/*.hpp" "${ROOT}/bench/*.cpp" "${ROOT}/tests/*.hpp" "${ROOT}/tests/*.cpp")
list(FILTER sources EXCLUDE REGEX "^build/")
list(LENGTH sources count)
if(count EQUAL 0)
  message(FATAL_ERROR "check_format: no sources under ${ROOT}")
endif()
set(bad "")
foreach(f IN LISTS sources)
  execute_process(COMMAND "${CLANG_FORMAT}" --dry-run --Werror "${f}" WORKING_DIRECTORY "${ROOT}"
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(NOT rc EQUAL 0)
    list(APPEND bad "${f}")
  endif()
endforeach()
if(bad)
  list(JOIN bad "\n  " listed)
  message(FATAL_ERROR "check_format: these files differ from .clang-format (run ${CLANG_FORMAT} -i on them):\n  ${listed}")
endif()
message(STATUS "check_format: ${count} files follow .clang-format")
