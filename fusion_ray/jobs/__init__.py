"""Dataset jobs without a runner: items and manifests, the plan, reading, per-segment status,
parts (resume), the ordered writer, the report and the finish. Both runners use them; no Ray here."""
