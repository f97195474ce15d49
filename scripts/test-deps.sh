#!/bin/sh
# Creates .venv with the Python packages the test tiers use (pytest, the reference packages).
# Quick when already satisfied: pip only checks versions.
set -eu
cd "$(dirname "$0")/.."
# The chat page test drives Debian's chromium through its chromedriver; curl checks SSE framing.
PKGS="chromium chromium-driver curl"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    if [ "$(id -u)" -eq 0 ]; then
        echo "installing:$missing"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        # shellcheck disable=SC2086
        apt-get install -y -qq --no-install-recommends $missing
    else
        echo "note: the browser test needs:$missing (sudo apt-get install -y$missing)"
    fi
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -r tests/requirements.txt
# mlx (the MLX affine reference) has CPU wheels for Linux x86-64 and ARM64; where it does not
# install, the MLX parity tests say so and skip.
.venv/bin/python -c "import mlx.core" 2>/dev/null ||
    .venv/bin/python -m pip install -q --disable-pip-version-check "mlx[cpu]==0.32.4" ||
    echo "note: mlx did not install; MLX parity tests will be skipped"
