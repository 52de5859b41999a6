"""The ground floor's schemas: what every room spells the same way. The tables' columns and
their wire form (``tables``), the machine's signal names and what each means (``signals``),
a run's phases and the data-message keys the engines publish under (``progress``). The
engine fills them, the parser builds them, the analysis reads them; nothing here imports
another nbtools room but ``common``."""
