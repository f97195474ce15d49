#!/bin/sh
# Cross-checks the AArch64 NEON kernels from an x86-64 machine: builds the CPU kernel and attention
# unit tests for aarch64 with the cross compiler (only base, tensor and backend/cpu: the full
# library needs jansson/pcre2/utf8proc, which the cross toolchain lacks) and runs every case in
# its own process under qemu-aarch64, three ways:
#   max         -cpu max: NEON + dot product, so every *_neon.c variant is tested against the ref;
#   cortex-a72  -cpu cortex-a72: NEON without the dot product (the int8 dots fall back to the ref);
#   ref         -cpu max with HEARTH_CPU_ISA=ref: the reference kernels alone.
# Like CMake, dot_neon.c alone is compiled with -march=armv8.2-a+dotprod; the rest stays armv8-a.
# A dev tool, not part of `make test`. Needs: apt-get install gcc-aarch64-linux-gnu
# libc6-dev-arm64-cross qemu-user. Exits 0 with a message when they are missing, 1 on any failure.
set -eu
cd "$(dirname "$0")/.."

CC=${CC_AARCH64:-aarch64-linux-gnu-gcc}
QEMU=${QEMU_AARCH64:-qemu-aarch64}
OUT=${CROSS_NEON_DIR:-build/cross-neon}
for tool in "$CC" "$QEMU"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "cross-check-neon: $tool not found; skipping (apt-get install gcc-aarch64-linux-gnu" \
             "libc6-dev-arm64-cross qemu-user)"
        exit 0
    fi
done

CFLAGS="-std=c11 -O3 -DNDEBUG -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Werror
        -Iinclude -Isrc -Itests/unit -DHX_TEST_DIR=\"$(pwd)/tests\""
mkdir -p "$OUT/obj"

# ---- build ----
objs=""
for src in src/base/*.c src/tensor/*.c src/backend/cpu/*.c; do
    case $src in *_avx2.c|*_avx512.c) continue ;; esac
    arch=-march=armv8-a
    case $src in */dot_neon.c) arch=-march=armv8.2-a+dotprod ;; esac
    obj="$OUT/obj/$(echo "$src" | tr / _ | sed 's/\.c$/.o/')"
    # shellcheck disable=SC2086
    $CC $CFLAGS $arch -c "$src" -o "$obj" ||
        { echo "cross-check-neon: $src does not compile"; exit 1; }
    objs="$objs $obj"
done
cat >"$OUT/isa_probe.c" <<'EOF'
#include <stdio.h>
#include "base/cpu.h"
int main(void)
{
    char names[128];
    hx_cpu_isa_names(hx_cpu_isa(), names, sizeof names);
    puts(names);
    return 0;
}
EOF
# The unit test's random activations never land exactly on a rounding tie, so this checks that
# the NEON quantizer rounds ties to even as the reference does (amax 127: every x.5 is a tie).
cat >"$OUT/act_ties.c" <<'EOF'
#include <stdio.h>
#include <string.h>
#include "backend/cpu/act_quant.h"
int main(void)
{
    float x[64];
    int8_t q0[64], q1[64];
    float d0[2], d1[2];
    int16_t s0[4], s1[4];
    for (int i = 0; i < 64; i++) x[i] = (float)(i - 32) + 0.5f;
    x[0] = 127.0f;
    x[32] = -127.0f;
    hx_act_quant_ref(x, q0, d0, s0, 64);
    hx_act_quant_neon(x, q1, d1, s1, 64);
    return memcmp(q0, q1, sizeof q0) != 0 || memcmp(d0, d1, sizeof d0) != 0 ||
           memcmp(s0, s1, sizeof s0) != 0;
}
EOF
tests="test_cpu_kernels test_cpu_attention"
# shellcheck disable=SC2086
for t in $tests isa_probe act_ties; do
    src=tests/unit/$t.c
    case $t in isa_probe|act_ties) src=$OUT/$t.c ;; esac
    $CC $CFLAGS -march=armv8-a "$src" $objs -static -lm -lpthread -o "$OUT/$t" ||
        { echo "cross-check-neon: $t does not link"; exit 1; }
done

# ---- ISA detection ----
isa_max=$("$QEMU" -cpu max "$OUT/isa_probe")
isa_a72=$("$QEMU" -cpu cortex-a72 "$OUT/isa_probe")
isa_ref=$(HEARTH_CPU_ISA=ref "$QEMU" -cpu max "$OUT/isa_probe")
echo "hx_cpu_isa: -cpu max: $isa_max; -cpu cortex-a72: $isa_a72; HEARTH_CPU_ISA=ref: $isa_ref"
fail=0
[ "$isa_max" = "neon neon-dot" ] || { echo "FAIL: -cpu max should report 'neon neon-dot'"; fail=1; }
[ "$isa_a72" = "neon" ] || { echo "FAIL: -cpu cortex-a72 should report 'neon'"; fail=1; }
[ "$isa_ref" = "ref" ] || { echo "FAIL: HEARTH_CPU_ISA=ref should report 'ref'"; fail=1; }
if "$QEMU" -cpu max "$OUT/act_ties"; then
    echo "hx_act_quant_neon: rounds ties to even, as the reference"
else
    echo "FAIL: hx_act_quant_neon rounds ties differently from hx_act_quant_ref"
    fail=1
fi

# ---- the cases, each in its own process (as ctest runs them) ----
# ref_isa_env_selects_reference_kernels re-executes /proc/self/exe with HEARTH_CPU_ISA=ref; an
# aarch64 binary can exec itself under qemu-user only where binfmt_misc runs aarch64 ELF files
# through qemu. Without that, the case runs with the variable already set (its child's half).
binfmt=no
[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] && binfmt=yes
for mode in max cortex-a72 ref; do
    cpu=$mode env_isa=
    [ "$mode" = ref ] && cpu=max env_isa=ref
    n_ok=0 n_all=0
    for t in $tests; do
        cases=$(sed -n 's/^[ \t]*{ *"\([a-z0-9_]*\)", *test_.*/\1/p' "tests/unit/$t.c")
        for c in $cases; do
            e=$env_isa
            [ "$c" = ref_isa_env_selects_reference_kernels ] && [ $binfmt = no ] && e=ref
            n_all=$((n_all + 1))
            if HEARTH_CPU_ISA=$e timeout 600 "$QEMU" -cpu "$cpu" "$OUT/$t" "$c" \
                    >"$OUT/$t.$c.$mode.log" 2>&1; then
                n_ok=$((n_ok + 1))
            else
                echo "FAIL [$mode] $t $c:"
                sed 's/^/    /' "$OUT/$t.$c.$mode.log"
                fail=1
            fi
        done
    done
    echo "[$mode] $n_ok/$n_all cases passed"
done
if [ $binfmt = no ]; then
    echo "note: no binfmt_misc for aarch64, so ref_isa_env_selects_reference_kernels ran only" \
         "its HEARTH_CPU_ISA=ref half"
fi
if [ $fail -ne 0 ]; then
    echo "cross-check-neon: FAILED (logs in $OUT)"
    exit 1
fi
echo "cross-check-neon: all passed"
