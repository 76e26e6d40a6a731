"""Runners place the chain (:mod:`fusion_ray.core.steps`) and never re-order or re-implement a
step: :mod:`~fusion_ray.runners.inline` runs it on one frame or image, :mod:`~fusion_ray.runners.local`
runs a job's groups in one process with threads and bounded queues (no Ray),
:mod:`~fusion_ray.runners.ray` as Ray Data stages on a cluster; :mod:`~fusion_ray.runners.job` runs a
job and picks the runner. The service's placements (fused, split) are in :mod:`fusion_ray.serve`."""
