"""Reachability: who may talk to whom under the network policies in play."""
