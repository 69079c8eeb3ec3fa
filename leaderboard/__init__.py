"""Leaderboard of C-OOD results: validated records, an append-only store, versioned tables and views.

Imports neither torch nor the harness or dataset builder; results arrive as JSON records.
"""
