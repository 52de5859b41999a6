"""Kineto events -> the events table: classify, read JSON, the tooltips' details. Imports only the schemas below it (never the analysis above); pure data, no torch at import."""
