"""The online API on Ray Serve: the engine's stage classes behind an HTTP ingress.

Modules (only ``deployments`` and ``app`` import Ray):

- ``settings``: the typed ``args`` of the Serve application (``configs/serve.yaml``).
- ``schemas``: request options and JSON bodies (they appear in the generated OpenAPI page).
- ``limits``: body cap, multipart parsing, image-header sniffing (decompression bombs),
  the in-flight limiter.
- ``metrics``: histograms and counters rendered in the Prometheus text format.
- ``deployments``: detector (CPU), swapper + embedder (GPU, ``@serve.batch``), enhancer
  (GPU, ``@serve.batch``) and the small service-state deployment (source store, metrics).
- ``app``: the FastAPI ingress and ``build_app(args)``.
- ``load``: the bounded loopback load test behind ``fusion-ray serve-load``.
"""
