"""dspark: a PyTorch DSpark trainer (arXiv 2607.05147) whose audited changes are switches.

`train(config, report=...)` is the entry point a Ray trial calls; see dspark.train.
"""

import os

# bit-reproducible MKL (a resumed run ends exactly where an uninterrupted one does);
# effective when dspark is imported before torch
os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")

from .config import PRESETS, Config, from_dict  # noqa: E402


def train(config, report=None, resume_from=None, progress=None):
    """See dspark.train.train (imported lazily so `import dspark` stays light)."""
    from .train import train as _train

    return _train(config, report=report, resume_from=resume_from, progress=progress)


__all__ = ["Config", "PRESETS", "from_dict", "train"]
