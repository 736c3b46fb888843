// weft/version.hpp: the headers' version is CMake's project(VERSION), in every form.
#include <weft/version.hpp>

#include <catch2/catch.hpp>

#include <string>

TEST_CASE("version: the macros, the values and project(VERSION) agree", "[version]") {
  const std::string project = WEFT_TEST_PROJECT_VERSION;  // from tests/CMakeLists.txt
  CHECK(std::string(WEFT_VERSION_STRING) == project);
  CHECK(std::string(weft::version_string) == project);
  CHECK(std::to_string(WEFT_VERSION_MAJOR) + "." + std::to_string(WEFT_VERSION_MINOR) + "." +
            std::to_string(WEFT_VERSION_PATCH) ==
        project);
  static_assert(weft::version.major == WEFT_VERSION_MAJOR && weft::version.minor == WEFT_VERSION_MINOR &&
                weft::version.patch == WEFT_VERSION_PATCH);
  static_assert(WEFT_VERSION == WEFT_VERSION_MAJOR * 10000 + WEFT_VERSION_MINOR * 100 + WEFT_VERSION_PATCH);
  static_assert(weft::version_info{0, 1, 0} < weft::version_info{0, 1, 1});
  static_assert(weft::version_info{0, 9, 9} < weft::version_info{1, 0, 0});
}
