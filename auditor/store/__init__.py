"""The findings store: schema, lifecycle, unit of work and queries (SQLAlchemy 2.x, Alembic)."""
