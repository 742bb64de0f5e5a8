"""a3m.testing."""
