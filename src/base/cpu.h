/* cpu.h - what the running CPU can do, detected once.
 *
 * Kernels are compiled per ISA into separate object files (each with its own -m flags) and one
 * of them is chosen at start from this mask, so a single binary runs on any x86-64 or ARM64
 * machine. HEARTH_CPU_ISA=ref in the environment forces the portable reference kernels. */
#ifndef HX_BASE_CPU_H
#define HX_BASE_CPU_H

enum {
    HX_ISA_NONE       = 0,
    HX_ISA_AVX2       = 1u << 0, /* with FMA and F16C */
    HX_ISA_AVX512     = 1u << 1, /* F, BW, VL, DQ */
    HX_ISA_AVX512VNNI = 1u << 2,
    HX_ISA_AVXVNNI    = 1u << 3,
    HX_ISA_NEON       = 1u << 4,
    HX_ISA_NEON_DOT   = 1u << 5,
};

/* The ISA mask of this CPU (cached after the first call; thread-safe). */
unsigned hx_cpu_isa(void);

/* Writes a space-separated list of the mask's names into buf ("avx2 avx512 ..." or "ref"). */
void hx_cpu_isa_names(unsigned isa, char *buf, unsigned len);

/* Physical cores (for the default thread count), at least 1. */
int hx_cpu_physical_cores(void);

#endif
