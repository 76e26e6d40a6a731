"""Ray Data pipeline: stage classes over numpy batches, datasource, ordered sink, jobs."""
