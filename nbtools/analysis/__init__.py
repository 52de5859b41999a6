"""Pure metrics over a run's tables: no torch, no bokeh, no widgets."""
