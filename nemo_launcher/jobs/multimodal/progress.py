"""A progress line every few seconds while a step works: count, rate and ETA, plus the step's own counters.

progress = Progress("download_images", total=9600, unit="images", enabled=cfg.progress)
progress.advance(1, ok=1)            # thread-safe; prints at most every `interval_s` seconds
->  download_images: 1200/9600 images (41.2/s, eta=3m24s) ok=1180 failed=20
"""

import sys
import threading
import time
from collections import Counter

from ..common.report import eta


class Progress:
    def __init__(
        self, what: str, total: int | None, unit: str, enabled: bool = True, interval_s: float = 5.0, stream=None
    ):
        self.what, self.total, self.unit = what, total, unit
        self.enabled, self.interval_s = enabled, interval_s
        self.stream = stream or sys.stderr
        self.done = 0
        self.counters: Counter = Counter()
        self.started = self.last = time.monotonic()
        self.lock = threading.Lock()

    def advance(self, number: int = 1, **counters: int) -> None:
        with self.lock:
            self.done += number
            self.counters.update(counters)
            now = time.monotonic()
            if self.enabled and now - self.last >= self.interval_s:
                self.last = now
                print(self.line(now), file=self.stream, flush=True)

    def rate(self, now: float | None = None) -> float:
        elapsed = (now or time.monotonic()) - self.started
        return self.done / elapsed if elapsed > 0 else 0.0

    def line(self, now: float | None = None) -> str:
        rate = self.rate(now)
        if self.total is None:
            text = f"{self.what}: {self.done} {self.unit} ({rate:.1f}/s)"
        else:
            left = (self.total - self.done) / rate if rate > 0 else None
            text = f"{self.what}: {self.done}/{self.total} {self.unit} ({rate:.1f}/s, eta={eta(left)})"
        extra = " ".join(f"{key}={value}" for key, value in sorted(self.counters.items()))
        return f"{text} {extra}".rstrip()
