"""a3m.aio."""
