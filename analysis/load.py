"""Renamed `analysis.sweep_reader`; this old name is the same module, so that older imports
still resolve."""

import sys

from analysis import sweep_reader

sys.modules[__name__] = sweep_reader
