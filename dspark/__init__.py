"""dspark: a PyTorch DSpark trainer (arXiv 2607.05147) whose audited changes are switches.

`train(config, report=...)` is the entry point a Ray trial calls; see dspark.train.
"""

from .config import PRESETS, Config, from_dict


def train(config, report=None, resume_from=None, progress=None):
    """See dspark.train.train (imported lazily so `import dspark` stays light)."""
    from .train import train as _train

    return _train(config, report=report, resume_from=resume_from, progress=progress)


__all__ = ["Config", "PRESETS", "from_dict", "train"]
