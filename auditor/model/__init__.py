"""Typed, immutable domain objects shared by every layer. No I/O here."""
