"""The judging: the tolerance policy and its exceptions, and cuDNN's published checksums."""
