# cmake -P driver of the bench_arch_flags test (see CMakeLists.txt next to it).
#
# 1. Configures weft with the benchmarks and warnings as errors, and a candidate list
#    whose first two entries this compiler rejects: an unknown CPU (an error), and the
#    feature set that a CPU newer than clang makes -march=native produce (clang warns
#    "invalid feature combination", an error under -Werror; g++-12 does not know the
#    flag). The check must choose the third, say so, write it to bench/build-info.txt,
#    and the fib benchmark must build with it (and with no rejected flag) and verify
#    its answer.
# 2. Configures again with only rejected candidates: the configure must fail, naming them.
foreach(var IN ITEMS SOURCE_DIR WORK_DIR GENERATOR CXX PROCESSOR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "bench_arch_flags: -D${var}=... is required")
  endif()
endforeach()

set(unknown_cpu "-march=weft-no-such-cpu")
set(newer_cpu "-march=sapphirerapids -mavx10.1-256")
if(PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  set(accepted "-march=x86-64-v2")
else()
  set(accepted "none")  # no x86-64 level exists elsewhere: the fallback is no flag
endif()

function(configure dir candidates out_rc out_text)
  file(REMOVE_RECURSE ${dir})
  set(make_program "")
  if(MAKE_PROGRAM)
    set(make_program -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
  endif()
  execute_process(
    COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${dir} -G ${GENERATOR} ${make_program}
            -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=Release -DWEFT_BUILD_TESTS=OFF -DWEFT_BUILD_BENCH=ON
            -DWEFT_WERROR=ON "-DWEFT_BENCH_ARCH_CANDIDATES=${candidates}"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(${out_rc} ${rc} PARENT_SCOPE)
  set(${out_text} "${out}${err}" PARENT_SCOPE)
endfunction()

# ---- 1. falls back past two rejected candidates, builds and runs ---------------------
set(dir ${WORK_DIR}/fallback)
configure(${dir} "${unknown_cpu};${newer_cpu};${accepted};none" rc text)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "bench_arch_flags: configure failed (${rc}):\n${text}")
endif()
string(REGEX MATCH "weft bench: architecture flags: [^\n]*" chosen_line "${text}")
message(STATUS "bench_arch_flags: the configure said: ${chosen_line}")
if(NOT chosen_line STREQUAL "weft bench: architecture flags: ${accepted}")
  message(FATAL_ERROR "bench_arch_flags: expected '${accepted}' to be chosen; the configure said:\n${text}")
endif()
if(NOT text MATCHES "not accepted here: '${unknown_cpu}'")
  message(FATAL_ERROR "bench_arch_flags: the configure did not name the rejected candidates:\n${text}")
endif()
file(READ ${dir}/bench/build-info.txt info)
if(NOT info MATCHES "arch_flags: ${accepted}\n")
  message(FATAL_ERROR "bench_arch_flags: bench/build-info.txt does not name '${accepted}':\n${info}")
endif()

execute_process(COMMAND ${CMAKE_COMMAND} --build ${dir} --target weft_bench_fib
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "bench_arch_flags: building fib failed (${rc}):\n${out}${err}")
endif()
# What fib.cpp was really compiled with (compile_commands.json: the top level exports it).
file(READ ${dir}/compile_commands.json commands)
string(REGEX MATCH "\"command\": \"[^\"]*bench/fib.cpp[^\"]*\"" fib_command "${commands}")
if(fib_command STREQUAL "")
  message(FATAL_ERROR "bench_arch_flags: no compile command for bench/fib.cpp in compile_commands.json")
endif()
foreach(rejected IN ITEMS weft-no-such-cpu avx10.1 sapphirerapids)
  if(fib_command MATCHES "${rejected}")
    message(FATAL_ERROR "bench_arch_flags: fib.cpp was compiled with a rejected flag:\n${fib_command}")
  endif()
endforeach()
if(NOT accepted STREQUAL "none" AND NOT fib_command MATCHES "${accepted}")
  message(FATAL_ERROR "bench_arch_flags: fib.cpp was not compiled with '${accepted}':\n${fib_command}")
endif()

execute_process(COMMAND ${dir}/bench/fib --flavor fj --threads 2 --size 25 --runs 1
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "output: 75025")
  message(FATAL_ERROR "bench_arch_flags: fib built with '${accepted}' did not verify (${rc}):\n${out}${err}")
endif()
message(STATUS "bench_arch_flags: fib built with '${accepted}' and verified fib(25) = 75025")

# ---- 2. nothing acceptable: a clear configure error ----------------------------------
configure(${WORK_DIR}/none-accepted "${unknown_cpu};${newer_cpu}" rc text)
if(rc EQUAL 0)
  message(FATAL_ERROR "bench_arch_flags: a list of only rejected candidates configured:\n${text}")
endif()
if(NOT text MATCHES "none of WEFT_BENCH_ARCH_CANDIDATES is accepted")
  message(FATAL_ERROR "bench_arch_flags: the configure failed without the expected message:\n${text}")
endif()
message(STATUS "bench_arch_flags: a list with nothing acceptable stopped the configure with a message")
file(REMOVE_RECURSE ${WORK_DIR})
