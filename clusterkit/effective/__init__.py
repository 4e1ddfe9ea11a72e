"""effective."""
