"""dspark: a PyTorch DSpark trainer (arXiv 2607.05147) whose audited changes are switches.

`train(config, report=...)` is the entry point a Ray trial calls; see dspark.train.
"""

import os
import sys
import warnings

# Bit-reproducible MKL (a resumed run ends exactly where an uninterrupted one does). MKL
# reads MKL_CBWR when torch loads it, so the variable must be set before torch is imported:
# here when dspark comes first, in the environment otherwise (the sweeps set it for their
# Ray workers, which inherit it). Too late, it says so instead of failing silently.
if "MKL_CBWR" not in os.environ:
    os.environ["MKL_CBWR"] = "AUTO,STRICT"
    if "torch" in sys.modules:
        warnings.warn("dspark: torch was imported before dspark, so MKL's reproducible mode may not apply "
                      "(resumed runs may differ in the last bits); import dspark first or set "
                      "MKL_CBWR=AUTO,STRICT in the environment", RuntimeWarning, stacklevel=2)

from .config import PRESETS, Config, from_dict  # noqa: E402


def train(config, report=None, resume_from=None, progress=None):
    """See dspark.train.train (imported lazily so `import dspark` stays light)."""
    from .train import train as _train

    return _train(config, report=report, resume_from=resume_from, progress=progress)


__all__ = ["Config", "PRESETS", "from_dict", "train"]
