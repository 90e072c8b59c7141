"""The use cases: scan, explain, connectivity, and the diff scan of a change. Each composes the
sources, the inventory and the core."""
