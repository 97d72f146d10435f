"""Recipes: experiment files turned into runs (tokenizer, data, model, training, report)."""
