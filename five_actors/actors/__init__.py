"""The five actors: game, inference, learner, parameter server and eval."""
