"""A job resumed across a change of what the chain makes never joins old and new segments."""

from fusion_ray.jobs import parts
from fusion_ray.jobs.config import JobConfig


def test_the_parts_key_changes_with_the_output_revision(monkeypatch):
    inputs, cfg = [("target", "abc")], JobConfig()
    before = parts.parts_key(inputs, cfg, "models")
    assert parts.parts_key(inputs, cfg, "models") == before
    monkeypatch.setattr(parts, "OUTPUT_REVISION", parts.OUTPUT_REVISION + 1)
    assert parts.parts_key(inputs, cfg, "models") != before
