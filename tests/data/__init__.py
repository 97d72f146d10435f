"""Tests of fullrank.data."""
