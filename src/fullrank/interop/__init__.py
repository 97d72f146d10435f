"""Models made elsewhere, in and out: Hugging Face model directories ↔ fullrank checkpoints
(:mod:`fullrank.interop.huggingface`)."""
