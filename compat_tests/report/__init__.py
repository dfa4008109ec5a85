"""Divergence reports. Today: the quick table; the full report (JSONL, JSON, Markdown, HTML) comes next."""
