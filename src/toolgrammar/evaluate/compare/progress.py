"""The progress bar of a side-by-side run (tqdm, when installed and asked for)."""

from __future__ import annotations

import time


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def tick(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass


class _Bar(_NoBar):
    """A tqdm bar over runs whose postfix shows the token being generated (on CPU a batch takes minutes).

    The postfix is redrawn at most once a second on a terminal and once every 30 s otherwise, so logs
    stay readable.
    """

    def __init__(self, total: int, initial: int):
        import sys

        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, initial=initial, unit="run", desc="compare", dynamic_ncols=True)
        self.every = 1.0 if sys.stderr.isatty() else 30.0
        self.last = 0.0

    def update(self, n: int = 1) -> None:
        self.bar.update(n)

    def tick(self, text: str) -> None:
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            self.bar.set_postfix_str(text)

    def close(self) -> None:
        self.bar.close()


def progress_bar(total: int, enabled: bool, *, initial: int = 0) -> _NoBar:
    if not enabled:
        return _NoBar()
    try:
        return _Bar(total, initial)
    except ImportError:  # pragma: no cover - tqdm comes with the compare extra
        return _NoBar()
