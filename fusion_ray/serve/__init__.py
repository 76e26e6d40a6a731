"""The online API on Ray Serve: the engine's stage classes behind an HTTP ingress.

Modules (only ``deployments`` and ``app`` import Ray):

- ``settings``: the typed ``args`` of the Serve application (``configs/serve.yaml``).
- ``schemas``: request options and JSON bodies (they appear in the generated OpenAPI page).
- ``quality``: FaceFusion's per-request options checked against the service's models and caps.
- ``limits``: the API error type, the declared body length, the upload and in-flight limiters.
- ``forms``: multipart bodies parsed with python-multipart as they arrive (byte cap, deadline).
- ``images``: upload header checks (``fusion_ray.imageheader``; decompression bombs) and decoding.
- ``auth``, ``timing``, ``ops``: bearer token, per-request stage timing, readiness and gauges.
- ``chain``: every call to another deployment, and the ingress' own paste and provenance.
- ``ingress``: ``IngressCore``, the endpoints' work.
- ``metrics``: histograms and counters rendered in the Prometheus text format.
- ``deployments``: detector (CPU), swapper + embedder (GPU, ``@serve.batch``), enhancer
  (GPU, ``@serve.batch``) and the small service-state deployment (source store, metrics).
- ``app``: the FastAPI routes over the core and ``build_app(args)``.
- ``load``: the bounded loopback load test behind ``fusion-ray bench serve``.
"""
