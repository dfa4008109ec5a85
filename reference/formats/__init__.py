"""Weight formats, NumPy only: how the canonical (cuDNN) tensors are named and shaped elsewhere.

``tf``: TensorFlow's canonical save format (``CudnnOpaqueParamsSaveable`` / the CudnnCompatible cells),
``torch``: PyTorch ``state_dict`` names, ``keras``: Keras 3 layer weights, ``onnx``: ONNX ``W``/``R``/``B``,
``safetensors``: a reader and writer of the safetensors file format (no pickle, no dependency),
``torch_archive``: a reader of ``torch.save``'s files that parses their pickle and never unpickles it,
``torch_save``: a writer of them (a state_dict, as ``torch.save`` writes it),
``tf_bundle``: a reader and writer of TensorFlow's checkpoint files (the V2 tensor bundle ``PREFIX.index`` +
``PREFIX.data-*``), without TensorFlow; ``files``: writing a file whole (beside it, then moved over it).
"""
