"""deployed."""
