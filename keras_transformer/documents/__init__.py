"""Whole texts around the translation contract."""
