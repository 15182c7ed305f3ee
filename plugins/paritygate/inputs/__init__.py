"""What the checks feed the models: goldens, a model's own input sets, seeded samples, Hypothesis strategies."""
