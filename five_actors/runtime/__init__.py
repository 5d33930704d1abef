"""The actor runtime: actors, the wire codec, links between nodes, and the node process."""
