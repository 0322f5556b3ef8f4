"""Placeholder: filled by the session that writes it."""

__all__: list[str] = []
