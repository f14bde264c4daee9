"""Runnable examples; installed as ``broker._examples`` so that ``broker spark-demo`` can run them."""
