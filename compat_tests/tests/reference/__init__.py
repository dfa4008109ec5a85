"""The reference itself: the spec cells, the engine against them, layouts and buffers, streaming, the
contract and its validation, invariants, and the reference with NumPy alone."""
