"""Model layer: the only package that imports onnxruntime.

Holds the model registry (``registry``: file, URL, hash, template, crop size, mean/std, colour
order and licence of each standard model), the model store (``store``: locate, verify and
download weights, with ``hashes`` and ``download``), the ONNX wrappers built on them, and the
stand-in models (``standins``, written with ``onnx_graph``; ``onnx_info`` reads FLOPs and metadata).
"""
