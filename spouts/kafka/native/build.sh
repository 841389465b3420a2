#!/usr/bin/env bash
# Builds the native range reader (_rangeread.so beside this script, or at RANGEREAD_OUT) with librdkafka's headers
# (Debian's librdkafka-dev, installed when missing and apt-get is at hand, unless RANGEREAD_INSTALL_HEADERS=no). The
# library does not link librdkafka: spouts/kafka/native/__init__.py loads it into the librdkafka confluent-kafka
# has loaded (its wheel's bundled copy, or the system's), so one librdkafka serves both readers and a built wheel
# runs with whichever confluent-kafka it is installed beside. Without it the service reads through confluent-kafka
# (kafka.reader: auto); `kafka.reader: native` requires it.
#   RANGEREAD_CFLAGS='-fsanitize=address,undefined' RANGEREAD_OUT=/tmp/x.so spouts/kafka/native/build.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
CC=${CC:-cc}
out=${RANGEREAD_OUT:-$here/_rangeread.so}
read -r -a extra <<< "${RANGEREAD_CFLAGS:--O2}"

if ! echo '#include <librdkafka/rdkafka.h>' | "$CC" -E -x c - >/dev/null 2>&1; then
    if [ "${RANGEREAD_INSTALL_HEADERS:-yes}" != no ] && command -v apt-get >/dev/null 2>&1 \
            && { [ "$(id -u)" -eq 0 ] || command -v sudo >/dev/null 2>&1; }; then
        SUDO=(); [ "$(id -u)" -ne 0 ] && SUDO=(sudo -n)
        echo "build.sh: installing Debian package librdkafka-dev (librdkafka's headers)" >&2
        export DEBIAN_FRONTEND=noninteractive
        "${SUDO[@]}" apt-get update -qq
        "${SUDO[@]}" apt-get install -y -qq --no-install-recommends librdkafka-dev >/dev/null
    else
        echo "build.sh: librdkafka's headers (librdkafka/rdkafka.h, Debian's librdkafka-dev) are missing" >&2
        exit 1
    fi
fi
mkdir -p "$(dirname "$out")"
"$CC" "${extra[@]}" -Wall -Wextra -Werror -shared -fPIC -o "$out.tmp" "$here/rangeread.c" -lpthread
mv "$out.tmp" "$out"
echo "build.sh: built $out (librdkafka: confluent-kafka's, at load time)" >&2
