"""A machine checked against a recipe: every tool, header, source and device it needs."""
