"""Runtimes behind one runner contract: loaders build lazily, runners infer."""
