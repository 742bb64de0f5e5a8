"""a3m.spark."""
