# cmake -DREADME=<README.md> -DOUT=<file.cpp> -P extract_example.cmake
#
# Writes to OUT the first ```cpp fenced block after the line
# `<!-- example: main -->` of README, behind a #line directive so compiler
# errors point into README. Without README, OUT is a program that exits 77
# (ctest: skipped); without the marker or the block, one that fails with the
# reason. OUT is rewritten only when its content changes.

set(marker "<!-- example: main -->")

function(write_if_changed content)
  if(EXISTS "${OUT}")
    file(READ "${OUT}" old)
    if(old STREQUAL content)
      return()
    endif()
  endif()
  file(WRITE "${OUT}" "${content}")
endfunction()

function(write_stub code message)
  write_if_changed("#include <cstdio>\nint main() {\n  std::fputs(R\"weft(readme test: ${message}\n)weft\", stderr);\n  return ${code};\n}\n")
endfunction()

if(NOT EXISTS "${README}")
  write_stub(77 "skipped: ${README} does not exist")
  return()
endif()

file(READ "${README}" text)
string(FIND "${text}" "\n${marker}\n" at)
if(at EQUAL -1)
  string(FIND "${text}" "${marker}\n" at)
  if(NOT at EQUAL 0)
    write_stub(1 "FAILED: ${README} has no line `${marker}` introducing the example")
    return()
  endif()
endif()

string(SUBSTRING "${text}" ${at} -1 rest)
string(FIND "${rest}" "\n```cpp\n" open)
if(open EQUAL -1)
  write_stub(1 "FAILED: no ```cpp block follows `${marker}` in ${README}")
  return()
endif()
math(EXPR body_at "${at} + ${open} + 8") # past "\n```cpp\n"
string(SUBSTRING "${text}" ${body_at} -1 body)
string(FIND "${body}" "\n```" close)
if(close EQUAL -1)
  write_stub(1 "FAILED: the ```cpp block after `${marker}` in ${README} is not closed")
  return()
endif()
string(SUBSTRING "${body}" 0 ${close} body)

# The README line the block starts on, for the #line directive.
string(SUBSTRING "${text}" 0 ${body_at} before)
string(REGEX REPLACE "[^\n]" "" newlines "${before}")
string(LENGTH "${newlines}" line)
math(EXPR line "${line} + 1")

write_if_changed("#line ${line} \"${README}\"\n${body}\n")
