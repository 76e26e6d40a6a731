"""The local runner: a job's groups in one process, threads and bounded queues, no Ray."""
