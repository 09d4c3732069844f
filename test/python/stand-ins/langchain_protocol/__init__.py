"""A stand-in for langchain-protocol, which the local package index lacks (see requirements-no-deps.txt)."""
