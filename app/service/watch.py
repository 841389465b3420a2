"""The shape of a background watch: something asked every few seconds by a daemon thread of its own.

A watch runs off the pipeline's path: a look that fails is logged by the watch and tried again at the
next interval, and never stops the pipeline. :class:`Watch` holds the thread and the loop; each watch
(:mod:`app.service.kafka_watch`, :mod:`app.service.partition_watch`) says only what it looks at.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod


class Watch(ABC):
    """Calls :meth:`look` every ``interval_s`` in a thread named ``name`` until the ``stop`` given to
    :meth:`start` is set; skips a turn while :meth:`active` is false; :meth:`close` runs as the thread ends."""

    def __init__(self, name: str, interval_s: float) -> None:
        self.name, self.interval_s = name, interval_s
        self._thread: threading.Thread | None = None

    def start(self, stop: threading.Event) -> None:
        """Look every ``interval_s`` until ``stop`` is set (a daemon thread)."""
        self._thread = threading.Thread(target=self._loop, args=(stop,), name=self.name, daemon=True)
        self._thread.start()

    @abstractmethod
    def look(self) -> None:
        """Look once (on the watch's thread)."""

    @abstractmethod
    def failed(self, error: Exception) -> None:
        """A look raised ``error``: say so (the next look is at the next interval)."""

    def active(self) -> bool:
        """Whether to look this turn (always, unless a watch says otherwise)."""
        return True

    def close(self) -> None:
        """Release what the looks opened (nothing, unless a watch says otherwise)."""
        return

    def _loop(self, stop: threading.Event) -> None:
        try:
            while not stop.wait(self.interval_s):
                if not self.active():
                    continue
                try:
                    self.look()
                except Exception as e:  # noqa: BLE001 - a watch that cannot look says nothing, it never stops the pipeline
                    self.failed(e)
        finally:
            self.close()
