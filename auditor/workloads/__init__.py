"""Workload adapters: each kind yields its pod roles (template × replicas, with operator labels)."""
