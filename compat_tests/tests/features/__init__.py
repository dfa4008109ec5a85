"""cuDNN's options, one a file, each held against the spec and across peers: bias modes, cell clipping,
packed sequences, the padding fill."""
