"""What crosses from the notebook to the engines: StepConfig, Workload, the scenarios' specs. No torch at import."""
