#pragma once

// MC_DCHECK(condition): asserts an internal invariant in debug builds. In
// builds with NDEBUG (Release, RelWithDebInfo) it compiles to nothing and
// does not evaluate `condition`, so it must have no side effects.

#ifdef NDEBUG
#define MC_DCHECK(condition)      \
  do {                            \
    if (false) (void)(condition); \
  } while (false)
#else
#include <cstdio>
#include <cstdlib>
#define MC_DCHECK(condition)                                                                 \
  do {                                                                                       \
    if (!(condition)) {                                                                      \
      std::fprintf(stderr, "%s:%d: MC_DCHECK failed: %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (false)
#endif
