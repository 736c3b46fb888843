# weft_choose_arch_flags(<out_var>): the architecture flags the benchmarks compile with,
# the first of WEFT_BENCH_ARCH_CANDIDATES that this compiler accepts on this machine.
#
# "Accepts" means: a small program that the flags vectorize compiles and links with the
# candidate and -Werror (a CPU newer than the compiler makes clang warn that a feature
# set is inconsistent, which is an error in a -Werror build), and then runs here (a
# -march level the CPU lacks dies of SIGILL). The candidate `none` adds no flag and is
# always accepted. Each verdict is cached (WEFT_BENCH_ARCH_OK_<n>, per candidate text),
# so a reconfigure does not repeat the checks; a new compiler starts a new cache.
#
# Sets <out_var> to the chosen flags as a list (empty for `none`) and caches the choice
# in WEFT_BENCH_ARCH_CHOSEN, for the benchmarks' build-info file.
include_guard(GLOBAL)
include(CheckCXXSourceRuns)

function(weft_choose_arch_flags out_var)
  set(probe [=[
#include <vector>
volatile float g_sink;
int main(int argc, char**) {
  // Vectorizable at -O2: compiled for the candidate's instruction set, and run.
  std::vector<float> a(1024), b(1024, 0.5f);
  for (int i = 0; i < 1024; ++i) a[i] = static_cast<float>(i * argc);
  float s = 0;
  for (int i = 0; i < 1024; ++i) s += a[i] * b[i];
  g_sink = s;
  return s > 0 ? 0 : 1;
}
]=])
  set(tried "")
  foreach(candidate IN LISTS WEFT_BENCH_ARCH_CANDIDATES)
    if(candidate STREQUAL "none")
      set(flags "")
      set(ok TRUE)
    else()
      separate_arguments(flags UNIX_COMMAND "${candidate}")
      string(MAKE_C_IDENTIFIER "${candidate}" id)
      set(var WEFT_BENCH_ARCH_OK_${id})
      set(CMAKE_REQUIRED_FLAGS "-O2 -Werror ${candidate}")
      set(CMAKE_REQUIRED_QUIET ON)
      check_cxx_source_runs("${probe}" ${var})
      set(ok ${${var}})
    endif()
    if(ok)
      if(tried)
        message(STATUS "weft bench: not accepted here: ${tried}")
      endif()
      message(STATUS "weft bench: architecture flags: ${candidate}")
      set(WEFT_BENCH_ARCH_CHOSEN "${candidate}" CACHE INTERNAL "the benchmarks' architecture flags")
      set(${out_var} "${flags}" PARENT_SCOPE)
      return()
    endif()
    list(APPEND tried "'${candidate}'")
  endforeach()
  string(JOIN ", " tried_text ${tried})
  message(FATAL_ERROR "weft bench: none of WEFT_BENCH_ARCH_CANDIDATES is accepted by ${CMAKE_CXX_COMPILER} "
                      "on this machine (tried ${tried_text}); add `none` to the list to build without "
                      "architecture flags")
endfunction()
