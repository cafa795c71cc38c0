"""Renamed `trials.workload_defaults`; this old name is the same module, so that older imports (and
pickles naming it) still resolve."""

import sys

from trials import workload_defaults

sys.modules[__name__] = workload_defaults
