/* convert.c - the reference F16/BF16 → float32 row converters and the choice of variant.
 *
 * The variant table lists every converter compiled into this binary, best first, each with the
 * ISA bits it needs; the reference is last and needs none. On first use the entries this CPU can
 * run are copied, in order, into a static list, and the first of them serves every later call.
 * That happens exactly once, guarded by a small atomic state machine, so the hot path pays one
 * acquire load per row and never re-checks CPU features. The only #if on the architecture is in
 * the table, per STYLE §4: intrinsics stay in the ISA files. */
#include "convert.h"

#include <stdatomic.h>

#include "base/cpu.h"
#include "base/f16.h"

/* ---- reference ---- */

void hx_convert_f16_row_ref(const uint16_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dst[i] = hx_f16_to_f32(src[i]);
}

void hx_convert_bf16_row_ref(const uint16_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dst[i] = hx_bf16_to_f32(src[i]);
}

/* ---- dispatch ---- */

static const hx_convert_variant all_variants[] = { /* best first; the reference last */
#if defined(__x86_64__)
    { "avx2", HX_ISA_AVX2, hx_convert_f16_row_avx2, hx_convert_bf16_row_avx2 },
#endif
    { "ref",  HX_ISA_NONE, hx_convert_f16_row_ref,  hx_convert_bf16_row_ref  },
};
#define N_VARIANTS ((int)(sizeof all_variants / sizeof all_variants[0]))

static hx_convert_variant usable[N_VARIANTS]; /* written once, before state becomes READY */
static int                n_usable;
static atomic_int         state;              /* UNSET → FILLING → READY */
enum { UNSET = 0, FILLING = 1, READY = 2 };

/* Fills `usable` on the first call. One thread wins the UNSET → FILLING exchange and fills it;
 * any other thread arriving meanwhile spins for the few nanoseconds that takes. The release
 * store of READY publishes the array to every thread that later loads READY with acquire. */
static const hx_convert_variant *selected(void)
{
    if (atomic_load_explicit(&state, memory_order_acquire) == READY) return &usable[0];
    int expected = UNSET;
    if (atomic_compare_exchange_strong_explicit(&state, &expected, FILLING,
                                                memory_order_acquire, memory_order_acquire)) {
        const unsigned isa = hx_cpu_isa();
        int n = 0;
        for (int i = 0; i < N_VARIANTS; i++)
            if ((all_variants[i].isa & ~isa) == 0) usable[n++] = all_variants[i];
        n_usable = n;
        atomic_store_explicit(&state, READY, memory_order_release);
    } else {
        while (atomic_load_explicit(&state, memory_order_acquire) != READY) {
        }
    }
    return &usable[0];
}

void hx_convert_f16_row(const uint16_t *src, float *dst, int64_t n)
{
    selected()->f16(src, dst, n);
}

void hx_convert_bf16_row(const uint16_t *src, float *dst, int64_t n)
{
    selected()->bf16(src, dst, n);
}

int hx_convert_variants(const hx_convert_variant **out)
{
    *out = selected();
    return n_usable;
}
