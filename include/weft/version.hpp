// weft/version.hpp: the version of weft the program is compiled against.
//
//   #include <weft/version.hpp>
//   #if WEFT_VERSION >= 100   // 0.1.0 or newer
//   static_assert(weft::version.major == WEFT_VERSION_MAJOR);
//
// The macros (WEFT_VERSION_MAJOR, _MINOR, _PATCH, _STRING and WEFT_VERSION) are
// defined in weft/config.hpp, the one place weft defines macros; this header adds the
// same as values.
#pragma once

#include <string_view>

#include "weft/config.hpp"

namespace weft {

/// A version number; compare versions with operator<=>. A plain value.
struct version_info {
  unsigned major;  ///< incompatible API changes
  unsigned minor;  ///< compatible additions
  unsigned patch;  ///< fixes
  /// Ordered by major, then minor, then patch.
  friend constexpr auto operator<=>(const version_info&, const version_info&) = default;
};

/// The version of the weft headers in use.
inline constexpr version_info version{WEFT_VERSION_MAJOR, WEFT_VERSION_MINOR, WEFT_VERSION_PATCH};
/// The same as "MAJOR.MINOR.PATCH".
inline constexpr std::string_view version_string = WEFT_VERSION_STRING;

}  // namespace weft
