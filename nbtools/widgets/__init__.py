"""The widgets a person drives in a live kernel: the panel (toggles -> StepConfig -> Lab.run
-> the live timeline, history, A/B comparison, export). The only room that builds ipywidgets
controls (progress bars aside: nbtools/lab/progress_view.py)."""
