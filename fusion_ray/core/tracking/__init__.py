"""Faces followed through a video or stream: matching, tracks, cheap re-detection between full
detections, the crops that may be skipped, smoothing and per-track selection."""
