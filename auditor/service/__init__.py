"""The audit service: stored runs, the scheduler, the HTTP API and metrics."""
