"""Plain reference cells: cuDNN's recurrent networks written as the documentation states them.

One file per ``cudnnRNNMode_t`` (``rnn.py`` relu and tanh, ``lstm.py``, ``gru.py`` with the textbook GRU),
each a forward step and its textbook backward step; ``network.py`` loops over layers, directions and time.
NumPy only, and independent of the tuned engine (``reference.recurrence``, ``backward``, ``buffers`` and the
step functions of ``modes``): this is the float64 truth the suite judges every implementation, the engine
included, against.
"""

from .network import Gradients, Network, Outputs, backward, forward, forward_and_backward

__all__ = ["Gradients", "Network", "Outputs", "backward", "forward", "forward_and_backward"]
