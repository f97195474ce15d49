#!/bin/sh
# Installs the Debian packages hearth needs to build and test, if any are missing.
# Idempotent: with everything present it only checks. Not root: prints the command instead.
set -eu

PKGS="build-essential cmake pkg-config libjansson-dev libmicrohttpd-dev libcurl4-openssl-dev libpcre2-dev libutf8proc-dev clang libclang-rt-dev python3 python3-venv python3-pip"

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    echo "hearth needs these Debian packages:$missing"
    echo "install them with:  sudo apt-get install -y$missing"
    exit 1
fi
echo "installing:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
