"""tqdm progress bars for downloads and training.

Every call that can take a while takes ``progress``: ``None`` (the
default) shows the bars only on a terminal (tqdm's own test, so a notebook
or a log stays clean), ``True`` always, ``False`` never. The Rust half
reports progress through callbacks, which draw here.
"""

from __future__ import annotations

# The plain (text) bars: tqdm.auto's notebook widgets need ipywidgets,
# which the package does not require.
from tqdm import tqdm

__all__ = ["DownloadBar", "TrainingBars"]


def _disable(progress: bool | None) -> bool | None:
    """tqdm's ``disable`` for a ``progress`` switch (None: off when not a
    terminal)."""
    return None if progress is None else not progress


class DownloadBar:
    """A bar of bytes received; call it with the bytes received so far."""

    def __init__(self, description: str, progress: bool | None) -> None:
        self._bar = tqdm(
            desc=description,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            disable=_disable(progress),
        )

    def __call__(self, received: int) -> None:
        self._bar.update(received - self._bar.n)

    def close(self) -> None:
        """Ends the bar."""
        self._bar.close()


class TrainingBars:
    """The bars of ``NativeClient.train``'s stages: the features' bytes,
    the release, then the epochs with the label-blind loss estimate. Call
    it as ``progress(stage, done, total, message)``."""

    def __init__(self, progress: bool | None) -> None:
        self._progress = progress
        self._features: DownloadBar | None = None
        self._release: tqdm | None = None
        self._epochs: tqdm | None = None

    def __call__(self, stage: str, done: int, total: int | None, message: str | None) -> None:
        if stage == "features":
            if self._features is None:
                self._features = DownloadBar("features", self._progress)
            self._features(done)
        elif stage == "release":
            # One bar at a time: a finished stage's bar is closed, so the
            # next one takes its line.
            if self._features is not None:
                self._features.close()
            if self._release is None:
                self._release = tqdm(
                    desc="release",
                    total=1,
                    bar_format="{desc}: {n}/{total} [{elapsed}]",
                    disable=_disable(self._progress),
                )
            self._release.update(done - self._release.n)
            if done:
                self._release.close()
        elif stage == "train":
            if self._epochs is None:
                self._epochs = tqdm(
                    desc="training", unit="epoch", total=total, disable=_disable(self._progress)
                )
            if message:
                self._epochs.set_postfix_str(message, refresh=False)
            self._epochs.update(done - self._epochs.n)
        elif stage == "done":
            if self._epochs is not None:
                # Converged before the most epochs: the run is whole.
                self._epochs.total = self._epochs.n
                self._epochs.refresh()
            self.close()

    def close(self) -> None:
        """Ends every bar (also when training failed half way)."""
        for bar in (self._features, self._release, self._epochs):
            if bar is not None:
                bar.close()
