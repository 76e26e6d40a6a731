"""fusion_ray: face swapping as a streaming, batched Ray pipeline.

Layers (dependencies point one way):
``types``/``errors``/``config`` -> ``ops`` -> ``models`` -> ``engine`` -> {``video``,
``pipeline``, ``serve``, ``bench``} -> ``cli``.
"""

__version__ = "0.1.0"
