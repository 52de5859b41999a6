"""What a run leaves: Run, Comparison, History, load_traces. Data classes; views come from nbtools.ui."""
