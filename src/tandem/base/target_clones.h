#pragma once
// Runtime ISA dispatch for hot loops: GCC compiles the function for AVX-512,
// AVX2 and baseline x86-64 and picks one when the library loads (an ifunc).
// Sanitizer builds turn it off: ifunc resolvers run before the sanitizer
// runtime is ready and crash it.

#if defined(TANDEM_NO_TARGET_CLONES)
#define TANDEM_TARGET_CLONES
#else
#define TANDEM_TARGET_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
