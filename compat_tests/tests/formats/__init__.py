"""Reading and writing weights: every file format (TensorFlow, PyTorch, Keras, ONNX, tensor files), conversions,
hostile and damaged files, and what a reader may open."""
