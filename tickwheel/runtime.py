"""Process-wide settings every long-running tickwheel process applies at start."""

from __future__ import annotations

import gc

# Container objects allocated (net of those freed since) before the cyclic collector runs a
# young-generation pass. A pass scans every young object still alive, and the intake's batches
# keep theirs alive until the batch is written: at the default (700) a batch of 2,000
# registrations triggered hundreds of passes, at 50,000 still about ten per batch, which
# measured about a quarter of the intake's Python time (8-14 µs per registration). At 500,000
# a pass comes every few batches and mostly finds the finished batches freed by reference
# counting. Our data is acyclic by construction, so the garbage waiting for a pass is small.
GC_GEN0_THRESHOLD = 500_000  # allocations


def tune_gc() -> None:
    """Fewer, larger young-generation passes, and never re-scan what start-up allocated."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)
