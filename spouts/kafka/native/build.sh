#!/usr/bin/env bash
# Builds the native range reader (_rangeread.so beside this script) against the librdkafka that
# confluent-kafka ships in the virtualenv of PYTHON (default: .venv/bin/python), with librdkafka's headers
# (Debian's librdkafka-dev, installed when missing and apt-get is at hand). Without it the service reads
# through confluent-kafka (kafka.reader: auto); `kafka.reader: native` requires it.
#   PYTHON=/opt/venv/bin/python spouts/kafka/native/build.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-.venv/bin/python}
CC=${CC:-cc}

if ! echo '#include <librdkafka/rdkafka.h>' | "$CC" -E -x c - >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" -eq 0 ] || command -v sudo >/dev/null 2>&1; }; then
        SUDO=(); [ "$(id -u)" -ne 0 ] && SUDO=(sudo -n)
        echo "build.sh: installing Debian package librdkafka-dev (librdkafka's headers)" >&2
        export DEBIAN_FRONTEND=noninteractive
        "${SUDO[@]}" apt-get update -qq
        "${SUDO[@]}" apt-get install -y -qq --no-install-recommends librdkafka-dev >/dev/null
    else
        echo "build.sh: librdkafka's headers (librdkafka/rdkafka.h) are missing and apt-get is not at hand" >&2
        exit 1
    fi
fi
# The librdkafka confluent-kafka loads: its wheel's copy (confluent_kafka.libs), else the system's.
libdir=$("$PYTHON" -c 'import confluent_kafka, pathlib; d = pathlib.Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs"; print(d if d.is_dir() else "")')
link=(-lrdkafka)
if [ -n "$libdir" ]; then
    lib=$(cd "$libdir" && ls librdkafka*.so* | head -1)
    link=(-L"$libdir" -l:"$lib" -Wl,-rpath,"$libdir")
fi
"$CC" -O2 -Wall -Wextra -Werror -shared -fPIC -o "$here/_rangeread.so.tmp" "$here/rangeread.c" "${link[@]}" -lpthread
mv "$here/_rangeread.so.tmp" "$here/_rangeread.so"
echo "build.sh: built $here/_rangeread.so (librdkafka: ${libdir:+$libdir/}${lib:-system})" >&2
