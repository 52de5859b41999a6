"""Offline HTML: the findings report and headless notebook export."""
