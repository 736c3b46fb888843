# cmake -P driver of the install test (see CMakeLists.txt next to it).
# Every step must succeed; the first failure fails the test with its command.
#
# Installs the build once into a private prefix, then consumes each component on its own:
#   CMake   consumer/ configured once per part: core, uring, asio, io, and tls where weft
#           was built with OpenSSL (-DWITH_TLS=ON; built and run), and
#           hidden (configure only; see consumer/CMakeLists.txt).
#   pkg-config  weft, weft-uring, weft-asio (and weft-tls): compiled, linked and run with the flags
#           pkg-config gives at the prefix; weft-io's flags checked.
# The Asio headers are really in /usr/include here, so "uring needs no Asio" is shown by
# what the uring consumer did rather than by removing them: its configure never looked
# for Asio (no WEFT_ASIO_INCLUDE_DIR in its cache, no weft::asio target), its compile
# commands name no Asio macro and, with Ninja, the headers its objects were compiled from
# (ninja -t deps) include no Asio header; the same for the asio consumer and liburing.
# That the config's Asio lookup goes through WEFT_ASIO_INCLUDE_DIR, and fails when it
# points at a directory without asio.hpp, is what the hidden part checks.

foreach(var IN ITEMS BUILD_DIR WORK_DIR CONSUMER_DIR GENERATOR CXX LIBDIR VERSION PKG_CONFIG)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "install test: -D${var}=... is required")
  endif()
endforeach()

string(TIMESTAMP t0 "%s")
function(step)
  string(JOIN " " shown ${ARGN})
  message(STATUS "install test: ${shown}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install test: step failed (${rc}): ${shown}")
  endif()
endfunction()
# out(<var> <command>...): runs a command that must succeed; its stdout in <var>.
function(out var)
  string(JOIN " " shown ${ARGN})
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE output OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install test: step failed (${rc}): ${shown}")
  endif()
  set(${var} "${output}" PARENT_SCOPE)
endfunction()
function(expect_no what text regex)
  if(text MATCHES "${regex}")
    message(FATAL_ERROR "install test: ${what} matches '${regex}' ('${CMAKE_MATCH_0}'):\n${text}")
  endif()
endfunction()
function(elapsed what)
  string(TIMESTAMP now "%s")
  math(EXPR s "${now} - ${t0}")
  message(STATUS "install test: ${what} done, ${s} s in all")
endfunction()

set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})

# ---- install, and what it put where -----------------------------------------------------
step(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
set(cmake_dir ${LIBDIR}/cmake/weft)
foreach(installed IN ITEMS include/weft/version.hpp include/weft/io/uring_context.hpp include/weft/io/use_task.hpp
                           share/doc/weft/LICENSE share/doc/weft/CHANGELOG.md
                           ${cmake_dir}/weft-config.cmake ${cmake_dir}/weft-config-version.cmake
                           ${cmake_dir}/weft-targets.cmake ${cmake_dir}/weft-uring-targets.cmake
                           ${cmake_dir}/weft-asio-targets.cmake ${cmake_dir}/weft-io-targets.cmake
                           ${LIBDIR}/pkgconfig/weft.pc ${LIBDIR}/pkgconfig/weft-uring.pc
                           ${LIBDIR}/pkgconfig/weft-asio.pc ${LIBDIR}/pkgconfig/weft-io.pc)
  if(NOT EXISTS ${prefix}/${installed})
    message(FATAL_ERROR "install test: ${installed} was not installed")
  endif()
endforeach()
file(READ ${prefix}/${cmake_dir}/weft-uring-targets.cmake text)
expect_no("weft-uring-targets.cmake" "${text}" "[Aa][Ss][Ii][Oo]")
file(READ ${prefix}/${cmake_dir}/weft-asio-targets.cmake text)
expect_no("weft-asio-targets.cmake" "${text}" "[Uu][Rr][Ii][Nn][Gg]")
elapsed("install")

# ---- CMake consumers, one per component -------------------------------------------------
# consume(<part> [cmake args...]): configures consumer/ for one part into its own build dir.
function(consume part)
  step(${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/${part}
    -G ${GENERATOR}
    -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}
    -DCMAKE_CXX_COMPILER=${CXX}
    -DCMAKE_BUILD_TYPE=${BUILD_TYPE}
    -DCMAKE_CXX_FLAGS=${FLAGS}
    -DCMAKE_EXE_LINKER_FLAGS=${FLAGS}
    -DCMAKE_EXPORT_COMPILE_COMMANDS=ON --no-warn-unused-cli
    -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
    -DPART=${part}
    ${ARGN})
endfunction()
# build_and_run(<part> [<regex the headers and flags must not match>])
function(build_and_run part)
  set(dir ${WORK_DIR}/${part})
  step(${CMAKE_COMMAND} --build ${dir})
  step(${dir}/weft_consumer)
  if(ARGC GREATER 1)
    file(READ ${dir}/compile_commands.json commands)
    expect_no("the ${part} consumer's compile commands" "${commands}" "${ARGV1}")
    if(GENERATOR STREQUAL "Ninja")
      out(deps ${MAKE_PROGRAM} -C ${dir} -t deps)
      if(NOT deps MATCHES "weft/")
        message(FATAL_ERROR "install test: ninja -t deps in ${dir} lists no weft header:\n${deps}")
      endif()
      expect_no("the headers the ${part} consumer was compiled from" "${deps}" "${ARGV1}")
    endif()
  endif()
  elapsed("${part} consumer")
endfunction()

consume(core)
build_and_run(core "ASIO|/asio/|asio\\.hpp|liburing")
consume(uring)
build_and_run(uring "ASIO|/asio/|asio\\.hpp")
consume(asio)
build_and_run(asio "liburing")
consume(io)
build_and_run(io)
if(WITH_TLS)
  consume(tls)
  build_and_run(tls "ASIO|/asio/|asio\\.hpp")
endif()
file(MAKE_DIRECTORY ${WORK_DIR}/no-asio)
consume(hidden -DWEFT_ASIO_INCLUDE_DIR=${WORK_DIR}/no-asio)
elapsed("hidden consumer")

# ---- pkg-config consumers -------------------------------------------------------------
# Plain `pkg-config --cflags --libs <module>`: a static weft's dependencies are public in
# its .pc files (see cmake/weft-install.cmake).
set(ENV{PKG_CONFIG_PATH} ${prefix}/${LIBDIR}/pkgconfig)
set(ENV{LD_LIBRARY_PATH} "${prefix}/${LIBDIR}:$ENV{LD_LIBRARY_PATH}")  # for a shared weft
out(version ${PKG_CONFIG} --modversion weft)
if(NOT version STREQUAL VERSION)
  message(FATAL_ERROR "install test: pkg-config --modversion weft is '${version}', not ${VERSION}")
endif()
separate_arguments(flags UNIX_COMMAND "${FLAGS}")
# pc_consume(<module> <source> [<regex its flags must not match>])
function(pc_consume module source)
  out(cflags ${PKG_CONFIG} --cflags ${module})
  out(libs ${PKG_CONFIG} --libs ${module})
  if(ARGC GREATER 2)
    expect_no("pkg-config --cflags --libs ${module}" "${cflags} ${libs}" "${ARGV2}")
  endif()
  separate_arguments(cflags UNIX_COMMAND "${cflags}")
  separate_arguments(libs UNIX_COMMAND "${libs}")
  set(exe ${WORK_DIR}/pc-${module})
  step(${CXX} -std=c++20 ${flags} ${cflags} ${CONSUMER_DIR}/${source} -o ${exe} ${libs})
  step(${exe})
  elapsed("pkg-config ${module} consumer")
endfunction()
pc_consume(weft main.cpp "ASIO|asio|uring")
pc_consume(weft-uring uring_main.cpp "ASIO|asio")
pc_consume(weft-asio asio_main.cpp "uring")
if(WITH_TLS)
  pc_consume(weft-tls tls_main.cpp "ASIO|asio")
endif()
out(io_flags ${PKG_CONFIG} --cflags --libs weft-io)
foreach(want IN ITEMS "-DASIO_STANDALONE" "-lweft_uring" "-lweft_asio" "-lweft")
  string(FIND " ${io_flags} " " ${want} " at)
  if(at EQUAL -1)
    message(FATAL_ERROR "install test: pkg-config --cflags --libs weft-io lacks ${want}: ${io_flags}")
  endif()
endforeach()
