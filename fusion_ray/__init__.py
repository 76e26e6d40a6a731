"""fusion_ray: face swapping as a streaming, batched Ray pipeline.

The layers and the package tour: docs/ARCHITECTURE.md and the README (``tests/test_layers.py``
keeps the imports pointing one way).
"""

__version__ = "0.1.0"
