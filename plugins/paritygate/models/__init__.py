"""The model config: the TOML and its schema, the bundled models, known failures, the pass before any check."""
