"""Renamed `trials.fraction`; this old name is the same module, so that older imports (and
pickles naming it) still resolve."""

import sys

from trials import fraction

sys.modules[__name__] = fraction
