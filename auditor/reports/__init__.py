"""Renderers of scan results: json (the stable contract), table."""
