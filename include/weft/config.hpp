// weft/config.hpp: the only place weft defines macros (CONTRIBUTING.md,
// 'One place for macros').
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

/// 1 where the compiler may compute a thread-local's address once per function and
/// reuse it after a call: sanitizer instrumentation, shared-library code (TLS through
/// __tls_get_addr), and targets other than x86-64 (which reads %fs at every access).
/// A fiber can resume on another thread inside such a function, so there weft's inline
/// code reads its thread-locals through out-of-line calls (weft/executor.hpp).
#if WEFT_SANITIZED || !defined(__x86_64__) || (defined(__PIC__) && !defined(__PIE__))
#  define WEFT_TLS_VIA_CALLS 1
#else
#  define WEFT_TLS_VIA_CALLS 0
#endif

/// Inlining attributes of weft's own hot paths (internal; not meant for user code).
#if defined(__clang__) || defined(__GNUC__)
#  define WEFT_NOINLINE __attribute__((noinline))
#  define WEFT_INLINE inline __attribute__((always_inline))
#else
#  define WEFT_NOINLINE
#  define WEFT_INLINE inline
#endif

/// weft's version (weft/version.hpp has it as values too); project(VERSION) in
/// CMakeLists.txt is the same, which tests/unit/version_test.cpp checks.
#define WEFT_VERSION_MAJOR 0
#define WEFT_VERSION_MINOR 1
#define WEFT_VERSION_PATCH 0
#define WEFT_VERSION_STRING "0.1.0"
/// MAJOR * 10000 + MINOR * 100 + PATCH, for `#if WEFT_VERSION >= 100` (0.1.0).
#define WEFT_VERSION (WEFT_VERSION_MAJOR * 10000 + WEFT_VERSION_MINOR * 100 + WEFT_VERSION_PATCH)
