"""Function-preserving changes of a model's shape."""
