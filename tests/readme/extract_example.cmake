# cmake -DREADME=<document.md> -DNAMES=<name,name,...> -DOUT_DIR=<dir> -P extract_example.cmake
#
# For each NAME, writes OUT_DIR/readme_NAME.cpp: the first ```cpp fenced block after
# the line `<!-- example: NAME -->` of the markdown document README, behind a #line
# directive so compiler errors point into the document. Without the document, each
# file is a program that exits 77 (ctest: skipped); without the marker or the block,
# or for an io_uring example that does not catch weft::io::uring_unavailable (it must
# skip with 77 where io_uring is unavailable), one that fails with the reason. A file
# is rewritten only when its content changes, so only a changed example is recompiled.

function(write_if_changed out content)
  if(EXISTS "${out}")
    file(READ "${out}" old)
    if(old STREQUAL content)
      return()
    endif()
  endif()
  file(WRITE "${out}" "${content}")
endfunction()

function(write_stub out code message)
  write_if_changed("${out}" "#include <cstdio>\nint main() {\n  std::fputs(R\"weft(readme test: ${message}\n)weft\", stderr);\n  return ${code};\n}\n")
endfunction()

# extract(<name>): writes OUT_DIR/readme_<name>.cpp from the document's text in the
# caller's `text` (read there, not passed: an argument would go through list splitting).
function(extract name)
  set(out "${OUT_DIR}/readme_${name}.cpp")
  set(marker "<!-- example: ${name} -->")
  string(FIND "${text}" "\n${marker}\n" at)
  if(at EQUAL -1)
    string(FIND "${text}" "${marker}\n" at)
    if(NOT at EQUAL 0)
      write_stub("${out}" 1 "FAILED: ${README} has no line `${marker}` introducing the example")
      return()
    endif()
  endif()

  string(SUBSTRING "${text}" ${at} -1 rest)
  string(FIND "${rest}" "\n```cpp\n" open)
  if(open EQUAL -1)
    write_stub("${out}" 1 "FAILED: no ```cpp block follows `${marker}` in ${README}")
    return()
  endif()
  math(EXPR body_at "${at} + ${open} + 8") # past "\n```cpp\n"
  string(SUBSTRING "${text}" ${body_at} -1 body)
  string(FIND "${body}" "\n```" close)
  if(close EQUAL -1)
    write_stub("${out}" 1 "FAILED: the ```cpp block after `${marker}` in ${README} is not closed")
    return()
  endif()
  string(SUBSTRING "${body}" 0 ${close} body)

  string(FIND "${body}" "uring_context" uses_uring)
  string(FIND "${body}" "uring_unavailable" skips)
  if(NOT uses_uring EQUAL -1 AND skips EQUAL -1)
    write_stub("${out}" 1 "FAILED: example `${name}` uses io_uring but does not catch weft::io::uring_unavailable to exit 77")
    return()
  endif()

  # The document's line the block starts on, for the #line directive.
  string(SUBSTRING "${text}" 0 ${body_at} before)
  string(REGEX REPLACE "[^\n]" "" newlines "${before}")
  string(LENGTH "${newlines}" line)
  math(EXPR line "${line} + 1")

  write_if_changed("${out}" "#line ${line} \"${README}\"\n${body}\n")
endfunction()

string(REPLACE "," ";" NAMES "${NAMES}")
if(NOT NAMES)
  message(FATAL_ERROR "extract_example.cmake: NAMES is empty")
endif()

if(NOT EXISTS "${README}")
  foreach(name IN LISTS NAMES)
    write_stub("${OUT_DIR}/readme_${name}.cpp" 77 "skipped: ${README} does not exist")
  endforeach()
  return()
endif()

file(READ "${README}" text)
foreach(name IN LISTS NAMES)
  extract(${name})
endforeach()
