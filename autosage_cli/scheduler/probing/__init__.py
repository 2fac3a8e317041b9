"""How the tuner measures: the measurer (measure), the probe plan (policy) and its sample, the
probe (probe, probe_run), its screen and its phase clock."""
