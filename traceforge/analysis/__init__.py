"""Analyses over the store: each reads the canonical tables and writes its own."""
