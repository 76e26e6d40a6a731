"""Model layer: the only package that imports onnxruntime.

Holds the model registry (``registry``: file, URL, hash, template, crop size, mean/std, colour
order and licence of each standard model), the model store (``store``: locate, verify and
download weights), and the ONNX wrappers built on them.
"""
