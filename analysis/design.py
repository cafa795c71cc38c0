"""Renamed `analysis.coded_design`; this old name is the same module, so that older imports (and
pickles naming it) still resolve."""

import sys

from analysis import coded_design

sys.modules[__name__] = coded_design
