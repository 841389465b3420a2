#!/usr/bin/env bash
# Installs the Debian tools the deployment tests run for real: `prometheus` (the server) and
# `promtool` (rule checks and rule unit tests), both from Debian's `prometheus` package.
# Does nothing when both are already on PATH. Where they are missing and apt-get is unavailable it
# fails with the reason: the tests need them (CI never skips them).
set -euo pipefail

missing=()
for tool in prometheus promtool; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_tools.sh: ${missing[*]} missing and apt-get is not available;" \
         "install Debian's 'prometheus' package (server + promtool) another way" >&2
    exit 1
fi
SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "install_tools.sh: need root or sudo to apt-get install prometheus" >&2; exit 1; }
    SUDO=(sudo -n)
fi
echo "install_tools.sh: installing Debian package prometheus (missing: ${missing[*]})" >&2
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
# --no-install-recommends: the server and promtool, without the exporters Debian recommends.
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends prometheus >/dev/null
for tool in prometheus promtool; do
    command -v "$tool" >/dev/null 2>&1 || { echo "install_tools.sh: $tool still missing after install" >&2; exit 1; }
done
