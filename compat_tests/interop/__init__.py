"""Reading and writing the files people have, beyond what ``reference.formats`` reads with NumPy alone: whole
models as ONNX graphs (export, import, onnxruntime's quantized LSTMs), Keras's own files (HDF5, read in a child
process), conversion between every format (``convert``), and the ``convert`` and ``infer`` commands with
``infer``'s state files."""
