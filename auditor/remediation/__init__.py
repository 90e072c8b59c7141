"""Fixes for findings: plans (pure), patches rendered from templates, minimal edits, re-audit."""
