"""The verifier: tasks, structure measurement, bound and exactness checks, reports, the CLI."""
