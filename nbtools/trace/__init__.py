"""Kineto events -> the events table: classify, read JSON, export. Pure data, no torch at import."""
