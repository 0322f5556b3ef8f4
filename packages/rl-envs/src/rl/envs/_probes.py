"""Probe environments: placeholder, filled by the session that writes them."""

__all__: list[str] = []
