"""The Ray runner: a job's groups as streaming Ray Data pipelines, on one machine or a cluster."""
