"""a3m.core."""
