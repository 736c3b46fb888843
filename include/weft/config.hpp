// weft/config.hpp: the only place weft defines macros (STYLE rule 4).
#pragma once

/// Compiled with AddressSanitizer or ThreadSanitizer: the frame cache is bypassed
/// so that the sanitizer sees every frame allocation and free.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#  define WEFT_SANITIZED 1
#elif defined(__has_feature)
#  if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#    define WEFT_SANITIZED 1
#  endif
#endif
#ifndef WEFT_SANITIZED
#  define WEFT_SANITIZED 0
#endif

/// Which sanitizer: fiber stack switches are announced to it (src/fiber.cpp).
#if defined(__SANITIZE_ADDRESS__)
#  define WEFT_ASAN 1
#elif defined(__has_feature)
#  if __has_feature(address_sanitizer)
#    define WEFT_ASAN 1
#  endif
#endif
#ifndef WEFT_ASAN
#  define WEFT_ASAN 0
#endif
#if defined(__SANITIZE_THREAD__)
#  define WEFT_TSAN 1
#elif defined(__has_feature)
#  if __has_feature(thread_sanitizer)
#    define WEFT_TSAN 1
#  endif
#endif
#ifndef WEFT_TSAN
#  define WEFT_TSAN 0
#endif

#if defined(__clang__) || defined(__GNUC__)
#  define WEFT_NOINLINE __attribute__((noinline))
#  define WEFT_INLINE inline __attribute__((always_inline))
#else
#  define WEFT_NOINLINE
#  define WEFT_INLINE inline
#endif
