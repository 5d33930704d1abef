"""Supervisor trees with Erlang/OTP semantics, OS-process children and the HTTP routes."""
