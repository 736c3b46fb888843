# Install rules of weft, included by the top-level CMakeLists.txt once every library
# target exists. What goes where (under the install prefix):
#   include/weft/...                     every public header (core and I/O)
#   lib/libweft*.a (or .so)              weft (core), weft_uring, weft_asio, weft_tls (with OpenSSL)
#   lib/cmake/weft/                      weft-config.cmake (see weft-config.cmake.in), its
#                                        version file, one <export>-targets.cmake per component
#   lib/pkgconfig/weft*.pc               weft, weft-uring, weft-asio, weft-io, weft-tls
#   share/doc/weft/                      LICENSE, CHANGELOG.md
include(CMakePackageConfigHelpers)

set(_weft_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/weft)

# One export set per component: the config includes the targets file of a component
# only when that component is asked for, and finds only its dependencies.
install(TARGETS weft EXPORT weft-targets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS weft_uring EXPORT weft-uring-targets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS weft_asio EXPORT weft-asio-targets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS weft_io EXPORT weft-io-targets)
set(_weft_exports weft weft-uring weft-asio weft-io)
if(TARGET weft_tls)  # built where OpenSSL 3 is found (io/CMakeLists.txt)
  install(TARGETS weft_tls EXPORT weft-tls-targets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  list(APPEND _weft_exports weft-tls)
endif()
foreach(_weft_export IN LISTS _weft_exports)
  install(EXPORT ${_weft_export}-targets NAMESPACE weft:: DESTINATION ${_weft_cmake_dir})
endforeach()
install(DIRECTORY include/weft DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# A static library carries its PRIVATE dependencies (hwloc, Boost.Context, liburing) to
# the consumer's link line; a shared one does not, and then the config need not find them.
get_target_property(_weft_type weft TYPE)
if(_weft_type STREQUAL "STATIC_LIBRARY")
  set(WEFT_CONFIG_STATIC TRUE)
else()
  set(WEFT_CONFIG_STATIC FALSE)
endif()
configure_package_config_file(cmake/weft-config.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/weft-config.cmake
                              INSTALL_DESTINATION ${_weft_cmake_dir})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/weft-config-version.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/weft-config.cmake ${CMAKE_CURRENT_BINARY_DIR}/weft-config-version.cmake
        DESTINATION ${_weft_cmake_dir})

# ---- pkg-config -------------------------------------------------------------------------
# Relocatable: prefix is found from the .pc file's own place (${pcfiledir}), so that
# `cmake --install <build> --prefix <anywhere>` yields working files.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(WEFT_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(WEFT_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  file(RELATIVE_PATH _weft_up "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
  string(REGEX REPLACE "/$" "" _weft_up "${_weft_up}")
  set(WEFT_PC_PREFIX "\${pcfiledir}/${_weft_up}")
  set(WEFT_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(WEFT_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(WEFT_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()

# -L<dir> for a library outside the compiler's own search path, "" otherwise.
function(_weft_pc_libdir_flag out file)
  get_filename_component(dir "${file}" DIRECTORY)
  if(dir AND NOT dir IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
    set(${out} "-L${dir} " PARENT_SCOPE)
  else()
    set(${out} "" PARENT_SCOPE)
  endif()
endfunction()

# Boost.Context has no pkg-config module: named in Libs.private.
get_target_property(_weft_boost_context Boost::context LOCATION)
_weft_pc_libdir_flag(_weft_boost_dir "${_weft_boost_context}")
set(WEFT_PC_BOOST_LIBS "${_weft_boost_dir}-lboost_context")
set(WEFT_PC_THREAD_LIBS "${CMAKE_THREAD_LIBS_INIT}")
# Standalone Asio has no pkg-config module either: its directory goes into Cflags when
# the compiler would not search it anyway.
set(WEFT_PC_ASIO_CFLAGS "")
if(NOT WEFT_ASIO_INCLUDE_DIR IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
  set(WEFT_PC_ASIO_CFLAGS " -I${WEFT_ASIO_INCLUDE_DIR}")
endif()

# A static weft (the default) needs hwloc, Boost.Context and liburing on every link line
# of its users, so they are public there (Requires, Libs): `pkg-config --libs weft-uring`
# links as is. (`--static` would also pull in hwloc's own private libraries, such as
# libudev, which a distribution ships for static linking only in their -dev packages.)
# A shared weft keeps them private (Requires.private, Libs.private).
if(WEFT_CONFIG_STATIC)
  set(WEFT_PC_REQUIRES "Requires")
  set(WEFT_PC_LIBS "Libs")
else()
  set(WEFT_PC_REQUIRES "Requires.private")
  set(WEFT_PC_LIBS "Libs.private")
endif()
foreach(_weft_pc IN LISTS _weft_exports)
  configure_file(cmake/${_weft_pc}.pc.in ${CMAKE_CURRENT_BINARY_DIR}/pkgconfig/${_weft_pc}.pc @ONLY)
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/pkgconfig/${_weft_pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()

install(FILES LICENSE CHANGELOG.md DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/weft)
