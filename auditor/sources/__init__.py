"""Sources of objects: manifest files (this package), clusters and snapshots (later)."""
