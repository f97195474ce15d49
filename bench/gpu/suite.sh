#!/bin/sh
# On the lent GPU machine: the starter's parity (tests/parity) and the integration tests'
# server suite against hearth on the GPU, from binaries packed in .gpu (bench/gpu/pack.sh),
# with the starter in $HEARTH_HOME/models (default /tmp/hh) and the suite's Python packages on
# PYTHONPATH. hearth and hx-logits run through wrappers that give them the packed libraries
# alone: exported to the whole suite, the packed libcurl shadows the one the system's curl
# needs (the tests run curl), and every curl-driven test fails with a symbol lookup error.
# The starter (94 MiB) and the binaries are more than one call to the lent machine may carry
# (64 MiB): carry it in pieces over calls made within the machine's idle window, appending
# each under /tmp (which stays while the machine is held), and check its sha256 at the end.
# usage: bench/gpu/suite.sh [PYTEST ARGS...]   (default: parity, then the server suite)
G=${G:-$(pwd)/.gpu}
blas=$(find / -name 'libcublas.so.13' -not -path '/proc/*' 2>/dev/null | head -1)
[ -n "$blas" ] || { echo "suite: no libcublas.so.13 on this machine"; exit 1; }
W=$(mktemp -d)
for b in hearth hx-logits; do
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$(dirname "$blas"):$G/lib" "$G/$b" > "$W/$b"
    chmod +x "$W/$b"
done
export HEARTH_HOME=${HEARTH_HOME:-/tmp/hh} HEARTH_BUILD=$W HEARTH_TEST_DEVICE=${HEARTH_TEST_DEVICE:-cuda}
if [ $# -gt 0 ]; then exec python3 -m pytest -q -p no:cacheprovider "$@"; fi
rc=0
python3 -m pytest -q -p no:cacheprovider -s tests/parity/test_parity.py -k "top1 or greedy or device" || rc=1
python3 -m pytest -q -p no:cacheprovider tests/integration/test_server_*.py tests/integration/test_batching.py || rc=1
exit $rc
