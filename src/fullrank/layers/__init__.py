"""Leaf layers: attention, masks, caches, feed-forward, embeddings."""
