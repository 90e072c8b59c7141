"""Settings: the declarative schema (schema.py), the audit sections and `Settings` (config.py) and
the service sections (service.py)."""
