"""What a person sees in a notebook: timelines, the panel, the HTML of summaries and comparisons."""
