#!/bin/sh
# On the lent GPU machine: runs binaries packed here by bench/gpu/pack.sh (in .gpu/) with the
# libraries they need. usage: bench/gpu/device_run.sh COMMAND... (inside, $G is the folder)
# e.g. bench/gpu/device_run.sh '$G/test_cuda_ops' 'compute-sanitizer $G/test_cuda_ops'
G=${G:-$(pwd)/.gpu}
export G
blas=$(find / -name 'libcublas.so.13' -not -path '/proc/*' 2>/dev/null | head -1)
[ -n "$blas" ] || { echo "device_run: no libcublas.so.13 on this machine"; exit 1; }
export LD_LIBRARY_PATH="$(dirname "$blas"):$G/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.sm --format=csv,noheader
rc=0
for cmd in "$@"; do
    echo "=== $cmd"
    sh -c "$cmd" || { echo "=== exit $? from: $cmd"; rc=1; }
done
exit $rc
