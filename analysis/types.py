"""Renamed `analysis.result_types`; this old name is the same module, so that older imports (and
pickles naming it) still resolve."""

import sys

from analysis import result_types

sys.modules[__name__] = result_types
