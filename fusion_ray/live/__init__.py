"""Live streams: real-time face swap of a camera stream over a WebSocket.

The pieces, host-independent (no Ray, no FastAPI; a host injects how frames are processed):

- :mod:`~fusion_ray.live.protocol`: the wire protocol (start message, events, the 12-byte frame
  header, close codes), exactly as the README specifies it;
- :mod:`~fusion_ray.live.config`: :class:`LiveConfig`, the limits and ladder settings;
- :mod:`~fusion_ray.live.buffers`: the latest-frame-wins queue and the bounded send queue;
- :mod:`~fusion_ray.live.ladder`: the degradation ladder (pure, with hysteresis);
- :mod:`~fusion_ray.live.scheduler`: fair sharing of a replica's processing slots across streams;
- :mod:`~fusion_ray.live.stats`: per-stream counters, latency percentiles, the rate limiter;
- :mod:`~fusion_ray.live.stream`: one stream's real-time loop; :mod:`~fusion_ray.live.hub`: the
  per-replica entry point a host calls (``await hub.serve(transport)``);
- :mod:`~fusion_ray.live.transport`: adapters from Starlette and ``websockets`` connections;
- :mod:`~fusion_ray.live.local`: an in-process host (Engine + Starlette) for tests and benchmarks;
- :mod:`~fusion_ray.live.direct`: a stream in this process with no socket (``fusion-ray live``
  without ``--url``), :mod:`~fusion_ray.live.window`: its output window when one can be shown;
- :mod:`~fusion_ray.live.client`: the Python client used by ``fusion-ray live`` and ``bench live``.
"""
