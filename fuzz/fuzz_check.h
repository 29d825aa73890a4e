// FUZZ_CHECK: a fuzz target's assertion. A broken invariant prints where and
// traps, which libFuzzer reports as a crash and saves the input for.
#pragma once

#include <cstdio>

#define FUZZ_CHECK(condition)                                                           \
  do {                                                                                  \
    if (!(condition)) {                                                                 \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, #condition); \
      __builtin_trap();                                                                 \
    }                                                                                   \
  } while (0)
