"""onnxruntime's dynamically quantized LSTMs (``com.microsoft.DynamicQuantizeLSTM``, what
``onnxruntime.quantization.quantize_dynamic`` makes of an ONNX ``LSTM``), read as float ONNX ``LSTM`` nodes
with their weights dequantized: an approximation, read only when asked (``dequantize``).

The node's inputs are an ``LSTM``'s (``X, W, R, B, sequence_lens, initial_h, initial_c, P``) followed by
``W_scale, W_zero_point, R_scale, R_zero_point``; ``W`` is int8 or uint8 ``[num_directions, input_size,
4*hidden_size]`` and ``R`` ``[num_directions, hidden_size, 4*hidden_size]`` (transposed against the ONNX
``LSTM``'s ``[num_directions, 4*hidden_size, width]``); each scale and zero point is per direction
(``[num_directions]``) or per gate column (``[num_directions, 4*hidden_size]``). Dequantized,
``W = (W_q - zero_point) * scale`` in float32. onnxruntime computes such a node with its inputs quantized
to 8 bits at run time as well, which no float model does: the float model computes what the weights say,
not what onnxruntime's kernel rounds them to (``test_onnx_quantized.py`` measures the difference).
"""

from __future__ import annotations

import numpy as np

OP = "DynamicQuantizeLSTM"
DOMAIN = "com.microsoft"
NOTE = ("its int8 weights were dequantized (scale * (q - zero_point)): an approximation of what onnxruntime "
        "computes, which also quantizes the node's inputs to 8 bits at run time")


def _quantized(name: str, node_name: str, inits: dict, what: str) -> np.ndarray:
    if name not in inits:
        raise ValueError(f"node {node_name!r} ({OP}): {what} must be an initializer")
    value = inits[name]
    if what in ("W", "R"):
        if value.dtype not in (np.int8, np.uint8) or value.ndim != 3:
            raise ValueError(f"node {node_name!r} ({OP}): {what} must be int8 or uint8 [num_directions, width, "
                             f"4*hidden_size], got {value.dtype} {list(value.shape)}")
    return value


def dequantize_node(node, inits: dict) -> tuple[np.ndarray, np.ndarray]:
    """The float32 ``W [D, 4H, I]`` and ``R [D, 4H, H]`` of one ``DynamicQuantizeLSTM`` node, in the ONNX
    ``LSTM``'s layout; a scale or zero point of another shape or type than the node's spec says is refused."""
    inputs = [*node.input, *[""] * 12][:12]
    out = []
    for k, what in ((1, "W"), (2, "R")):
        q = _quantized(inputs[k], node.name, inits, what)
        D, rows, G = q.shape
        scale_name, zero_name = inputs[8 + 2 * (k - 1)], inputs[9 + 2 * (k - 1)]
        scale = _quantized(scale_name, node.name, inits, f"{what}_scale")
        zero = _quantized(zero_name, node.name, inits, f"{what}_zero_point") if zero_name else np.zeros((), q.dtype)
        for label, a in ((f"{what}_scale", scale), (f"{what}_zero_point", zero)):
            if a.shape not in ((D,), (D, G)) and not (label.endswith("zero_point") and a.shape == ()):
                raise ValueError(f"node {node.name!r} ({OP}): {label} must be [{D}] (per direction) or [{D}, {G}] "
                                 f"(per column), got {list(a.shape)}")
        if scale.dtype != np.float32 or zero.dtype != q.dtype:
            raise ValueError(f"node {node.name!r} ({OP}): {what}_scale must be float32 and {what}_zero_point "
                             f"{q.dtype}, got {scale.dtype} and {zero.dtype}")
        if not np.isfinite(scale).all():
            raise ValueError(f"node {node.name!r} ({OP}): {what}_scale holds a value that is not finite")

        def per(a):  # [D] -> [D, 1, 1], [D, G] -> [D, 1, G]
            return a.reshape(D, 1, 1) if a.ndim == 1 else a.reshape(D, 1, G) if a.ndim == 2 else a

        values = (q.astype(np.float32) - per(zero).astype(np.float32)) * per(scale)
        out.append(np.ascontiguousarray(values.transpose(0, 2, 1)))
    return out[0], out[1]


def dequantized(proto):
    """A copy of ``proto`` whose every ``DynamicQuantizeLSTM`` node of its main graph is an ONNX ``LSTM`` node
    over dequantized ``W`` and ``R`` initializers (its other inputs and attributes kept); refused where the
    main graph holds none (nothing to dequantize)."""
    import onnx
    from onnx import numpy_helper

    nodes = [n for n in proto.graph.node if n.op_type == OP and n.domain == DOMAIN]
    if not nodes:
        raise ValueError(f"dequantize: the ONNX graph holds no {DOMAIN} {OP} node (nothing to dequantize)")
    inits = {}
    for t in proto.graph.initializer:
        if t.name in {i for n in nodes for i in n.input}:
            inits[t.name] = numpy_helper.to_array(t)
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    taken = {t.name for t in proto.graph.initializer} | {o for n in proto.graph.node for o in n.output}
    for k, node in enumerate(copy.graph.node):
        if node.op_type != OP or node.domain != DOMAIN:
            continue
        W, R = dequantize_node(node, inits)
        names = []
        for what, value in (("W", W), ("R", R)):
            name = f"{node.name or OP}_{what}_dequantized"
            while name in taken:
                name += "_"
            taken.add(name)
            copy.graph.initializer.append(numpy_helper.from_array(value, name))
            names.append(name)
        inputs = list(node.input)[:8]
        while inputs and not inputs[-1]:
            inputs.pop()
        lstm = onnx.helper.make_node("LSTM", [inputs[0], *names, *inputs[3:]], list(node.output), name=node.name)
        lstm.attribute.extend(node.attribute)
        copy.graph.node[k].CopyFrom(lstm)
    return copy
