"""Interoperability that needs a framework package (onnx): whole-model export and import."""
