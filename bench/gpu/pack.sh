#!/bin/sh
# Packs the GPU binaries of a build made here, and the shared libraries they need that a bare
# CUDA image lacks, into one folder to carry to the lent GPU machine (which cannot install
# packages): bench/gpu/device_run.sh there runs from it. libc, libm and the CUDA libraries stay
# the machine's own (cuBLAS is far too large to carry and the image has it), as are the C++
# runtime's (the image's are newer).
# usage: bench/gpu/pack.sh BUILD_DIR OUT_DIR
set -eu
build=$1 out=$2
rm -rf "$out"
mkdir -p "$out/lib"
for b in hearth hx-logits test_cuda_ops hx-gpu-roofline hx-gpu-kernels hx-gpu-step-probe \
         hx-gpu-boundary; do
    [ -x "$build/$b" ] && cp "$build/$b" "$out/"
done
for b in "$out"/*; do
    [ -f "$b" ] || continue
    ldd "$b" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
    case $(basename "$lib") in
        libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*|ld-linux*|libstdc++*|libgcc_s*|libcublas*|libcuda*) ;;
        *) cp -L "$lib" "$out/lib/" ;;
    esac
done
du -sh "$out"
