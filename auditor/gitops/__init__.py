"""Git operations (fetching audit targets; later, fix branches and pull requests)."""
