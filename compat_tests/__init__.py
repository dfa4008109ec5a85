"""The compatibility suite around the reference: a config and its arrays (``config``), running one on the float64
truth and the engine (``run``), the implementations judged (``peers/``), the judging (``judge/``), the divergence
report (``report/``), reading and writing the files people have (``interop/``), the GPU run (``gpu/``), Hypothesis
strategies (``strategies``), the command line (``cli``) and its plumbing (``interrupts``, ``optional``, ``host``).
The suite's own tests are in ``tests/``, not installed. A plugin peer imports ``peers``, ``config``, ``run`` and
``policy`` (docs/peers.md)."""
