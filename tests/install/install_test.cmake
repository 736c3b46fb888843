# cmake -P driver of the install test (see CMakeLists.txt next to it).
# Every step must succeed; the first failure fails the test with its command.

foreach(var IN ITEMS BUILD_DIR WORK_DIR CONSUMER_DIR GENERATOR CXX)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "install test: -D${var}=... is required")
  endif()
endforeach()

function(step)
  string(JOIN " " shown ${ARGN})
  message(STATUS "install test: ${shown}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install test: step failed (${rc}): ${shown}")
  endif()
endfunction()

set(prefix ${WORK_DIR}/prefix)
set(consumer_build ${WORK_DIR}/consumer-build)
file(REMOVE_RECURSE ${WORK_DIR})

step(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
foreach(installed IN ITEMS include/weft/version.hpp share/doc/weft/LICENSE share/doc/weft/CHANGELOG.md)
  if(NOT EXISTS ${prefix}/${installed})
    message(FATAL_ERROR "install test: ${installed} was not installed")
  endif()
endforeach()
step(${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${consumer_build}
  -G ${GENERATOR}
  -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}
  -DCMAKE_CXX_COMPILER=${CXX}
  -DCMAKE_BUILD_TYPE=${BUILD_TYPE}
  -DCMAKE_CXX_FLAGS=${FLAGS}
  -DCMAKE_EXE_LINKER_FLAGS=${FLAGS}
  -DCMAKE_PREFIX_PATH=${prefix}
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
step(${CMAKE_COMMAND} --build ${consumer_build})
step(${consumer_build}/weft_consumer)
step(${consumer_build}/weft_io_consumer)
