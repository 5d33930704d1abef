"""five_actors: OpenAI Five-style distributed self-play training."""

__version__ = "0.1.0"
