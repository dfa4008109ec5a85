"""The report about a user's own trained model (``rnn-compat report --model``): every backend on the file's
weights, the file in its own framework, a verdict, a diagnosis and the tolerance to use.

``files`` (the model files read and compared) and ``inputs`` -> ``units`` (one backend x dtype x input -> one
record, with ``diagnosis``, ``locate``, ``invariance``; ``frameworks`` runs a file as it is) -> the grid report's
sweep -> ``page`` (``report.json``, ``report.md``, ``index.html``); ``plan`` holds the run's own files, ``command``
the command line's side.
"""
