"""The build step pyproject.toml cannot declare: the native Kafka reader compiled into the wheel.

``build_py`` runs ``spouts/kafka/native/build.sh`` into the build tree (a C compiler and librdkafka's headers, Debian's
librdkafka-dev; never installed from here). Where they are missing the package installs without it and the service
reads through confluent-kafka (``kafka.reader: auto`` says so at start-up). An editable install (``make venv``) builds
it in place instead. The wheel is platform-specific: it may hold a shared library.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

NATIVE = Path("spouts", "kafka", "native")


class BuildPyWithNativeReader(build_py):
    """``build_py``, then ``_rangeread.so`` beside the reader's modules when it builds here."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return  # make venv builds it in the source tree
        out = Path(self.build_lib) / NATIVE / "_rangeread.so"
        out.unlink(missing_ok=True)  # an earlier build's, never shipped in place of this one's
        env = {**os.environ, "RANGEREAD_OUT": str(out.resolve()), "RANGEREAD_INSTALL_HEADERS": "no"}
        done = subprocess.run(["bash", str(NATIVE / "build.sh")], env=env, check=False)  # noqa: S603, S607  (our script)
        if done.returncode != 0:
            self.announce("trident-stream: the native Kafka reader was not built (above); the package reads Kafka "
                          "through confluent-kafka's messages", level=3)


class PlatformDistribution(Distribution):
    """A wheel tagged for this platform (it holds a shared library), not a pure one."""

    def has_ext_modules(self) -> bool:
        return True


setup(cmdclass={"build_py": BuildPyWithNativeReader}, distclass=PlatformDistribution)
