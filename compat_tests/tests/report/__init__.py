"""The divergence report: its run, grids, verdicts, errors, time limits, interrupts, rendering, page, diff and
fleet."""
