#!/bin/sh
# Creates .venv with the Python packages the test tiers use (pytest, the reference packages).
# Quick when already satisfied: pip only checks versions.
set -eu
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -r tests/requirements.txt
# mlx (the MLX affine reference) has CPU wheels for Linux x86-64 and ARM64; where it does not
# install, the MLX parity tests say so and skip.
.venv/bin/python -c "import mlx.core" 2>/dev/null ||
    .venv/bin/python -m pip install -q --disable-pip-version-check "mlx[cpu]==0.32.4" ||
    echo "note: mlx did not install; MLX parity tests will be skipped"
