"""The suite's own machinery: the command line, interrupts of commands, outputs, strategies, docs' examples,
the benchmark harness, the machine's description, and the structure of the house (imports)."""
