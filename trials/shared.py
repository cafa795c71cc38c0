"""Renamed `trials.shared_artifacts`; this old name is the same module, so that older imports (and
pickles naming it) still resolve."""

import sys

from trials import shared_artifacts

sys.modules[__name__] = shared_artifacts
