"""Checks: turn a spec (and, optionally, the machine) into findings.

The spec rules of other modules register themselves in :data:`verlctl.checks.rules.RULES` when imported;
importing them here (whichever checks module is imported first) registers them before any verdict runs,
without an import circle through ``rules.py``.
"""

from verlctl.checks import async_rules as async_rules  # verl 0.9.1's async trainers' asserts
from verlctl.checks import defects as defects  # the known-defect table's spec-only entries
from verlctl.checks import managed as managed  # extra overrides of keys verlctl manages
