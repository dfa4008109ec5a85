"""The report about a user's own trained model: every backend on the file's weights, the file in its own framework, a verdict, a diagnosis and the tolerance to use."""
