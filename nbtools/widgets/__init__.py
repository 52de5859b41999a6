"""The widgets a person drives in a live kernel: the panel (toggles -> StepConfig -> Lab.run
-> the live timeline, history, A/B comparison, export) and a run's progress bars. The only
room that imports ipywidgets (.importlinter says so)."""
