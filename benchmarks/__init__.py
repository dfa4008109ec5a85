"""Speed against peers: each implementation timed in its own process, alternating, ratios of medians."""
