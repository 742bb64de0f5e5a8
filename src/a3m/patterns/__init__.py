"""a3m.patterns."""
