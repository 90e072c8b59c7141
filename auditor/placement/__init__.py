"""Placement: where each pod role may land, with kube-scheduler filter semantics."""
