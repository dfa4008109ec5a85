"""The GPU run and cuDNN's binding: the ladder, the capture, the headers, the plumbing under the CPU fakes, and
the GPU tests themselves (skipped without a GPU)."""
