"""The lane game: a vectorised Dota-like 5v5 environment, its bots and replays."""
