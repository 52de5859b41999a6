"""The tutorial notebooks' helpers: custom steps for each claim and what the notebooks read off runs."""
