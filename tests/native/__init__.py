"""The native data plane (``a3m._native``) checked against its Python twins."""
