"""The benchmarks behind `five-actors bench NAME`.

Each benchmark is a module here with `add_arguments(parser)` and `run(args) -> dict`; the
command prints the dict as one JSON object.
"""

BENCHMARKS: dict[str, str] = {
    "transport": "five_actors.bench.transport",
    "env": "five_actors.bench.env",
    "env-train": "five_actors.bench.env_train",
    "learner": "five_actors.bench.learning",
    "learning": "five_actors.bench.learning_curve",
    "rollout": "five_actors.bench.rollout",
    "supervisor": "five_actors.bench.supervisor",
    "system": "five_actors.bench.system",
    "learn": "five_actors.bench.learn",
    "policy": "five_actors.bench.policy",
    "surgery": "five_actors.bench.surgery",
}
"""Benchmark name -> module path."""
