"""a3m.exon."""
