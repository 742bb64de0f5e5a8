"""a3m.cli."""
