"""a3m.runtime."""
