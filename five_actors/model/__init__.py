"""The policy network, PPO, model specs and checkpoints."""
