/* cpu.c - CPU feature detection: cpuid + xgetbv on x86-64, hwcaps on ARM64 Linux (sysctl on
 * macOS).
 *
 * OS support matters as much as the CPU's: AVX state must be enabled in XCR0, or the first
 * 256-bit instruction faults. */
#define _GNU_SOURCE
#include "cpu.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static unsigned long long xgetbv0(void)
{
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

static unsigned detect(void)
{
    unsigned a, b, c, d, isa = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
    if (!osxsave) return 0;
    const unsigned long long xcr0 = xgetbv0();
    const int ymm_ok = (xcr0 & 0x6) == 0x6, zmm_ok = (xcr0 & 0xE6) == 0xE6;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    const int avx2 = (b >> 5) & 1;
    const int avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1, avx512bw = (b >> 30) & 1,
              avx512vl = (b >> 31) & 1, avx512vnni = (c >> 11) & 1;
    if (ymm_ok && avx2 && fma && f16c) isa |= HX_ISA_AVX2;
    if (zmm_ok && (isa & HX_ISA_AVX2) && avx512f && avx512dq && avx512bw && avx512vl) {
        isa |= HX_ISA_AVX512;
        if (avx512vnni) isa |= HX_ISA_AVX512VNNI;
    }
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 4) & 1) && (isa & HX_ISA_AVX2))
        isa |= HX_ISA_AVXVNNI;
    return isa;
}
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1UL << 20) /* the kernel's ABI bit (asm/hwcap.h), for older libc headers */
#endif
/* NEON (ASIMD) is mandatory on AArch64; the dot product (sdot/udot, ARMv8.2-A, optional there and
 * mandatory from 8.4) is reported by the kernel in AT_HWCAP, which also covers OS support. */
static unsigned detect(void)
{
    unsigned isa = HX_ISA_NEON;
    if (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) isa |= HX_ISA_NEON_DOT;
    return isa;
}
#elif defined(__aarch64__) && defined(__APPLE__)
#include <sys/sysctl.h>
static unsigned detect(void)
{
    unsigned isa = HX_ISA_NEON;
    int v = 0;
    size_t len = sizeof v;
    if (sysctlbyname("hw.optional.arm.FEAT_DotProd", &v, &len, NULL, 0) == 0 && v)
        isa |= HX_ISA_NEON_DOT;
    return isa;
}
#elif defined(__aarch64__)
static unsigned detect(void) { return HX_ISA_NEON; } /* other OSes: no dot-product query here */
#else
static unsigned detect(void) { return 0; }
#endif

unsigned hx_cpu_isa(void)
{
    static atomic_uint cached = 0x80000000u; /* "not yet detected" */
    unsigned v = atomic_load_explicit(&cached, memory_order_acquire);
    if (v == 0x80000000u) {
        const char *force = getenv("HEARTH_CPU_ISA");
        v = (force && strcmp(force, "ref") == 0) ? HX_ISA_NONE : detect();
        atomic_store_explicit(&cached, v, memory_order_release);
    }
    return v;
}

void hx_cpu_isa_names(unsigned isa, char *buf, unsigned len)
{
    static const struct { unsigned bit; const char *name; } names[] = {
        {HX_ISA_AVX2, "avx2"},          {HX_ISA_AVX512, "avx512"}, {HX_ISA_AVX512VNNI, "avx512vnni"},
        {HX_ISA_AVXVNNI, "avxvnni"},    {HX_ISA_NEON, "neon"},     {HX_ISA_NEON_DOT, "neon-dot"},
    };
    size_t off = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!(isa & names[i].bit)) continue;
        int n = snprintf(buf + off, len - off, "%s%s", off ? " " : "", names[i].name);
        if (n < 0 || (size_t)n >= len - off) break;
        off += (size_t)n;
    }
    if (off == 0) snprintf(buf, len, "ref");
}

/* Counts distinct (physical id, core id) pairs in /proc/cpuinfo; falls back to online CPUs. */
int hx_cpu_physical_cores(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    int cores = 0;
    if (f) {
        char line[256];
        int phys = 0, n_pairs = 0;
        int pairs[1024][2];
        while (fgets(line, sizeof line, f)) {
            int v;
            if (sscanf(line, "physical id : %d", &v) == 1) phys = v;
            else if (sscanf(line, "core id : %d", &v) == 1) {
                int seen = 0;
                for (int i = 0; i < n_pairs; i++)
                    if (pairs[i][0] == phys && pairs[i][1] == v) seen = 1;
                if (!seen && n_pairs < 1024) {
                    pairs[n_pairs][0] = phys;
                    pairs[n_pairs][1] = v;
                    n_pairs++;
                }
            }
        }
        fclose(f);
        cores = n_pairs;
    }
    if (cores <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        cores = n > 0 ? (int)n : 1;
    }
    return cores;
}
