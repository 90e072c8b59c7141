"""PodTemplate's hash is computed once, from every field that takes part in it."""

from __future__ import annotations

import dataclasses

from auditor.model.objects import PodTemplate, Toleration


def test_the_cached_hash_covers_every_hashed_field() -> None:
    hashed = [
        f.name for f in dataclasses.fields(PodTemplate) if f.hash is not False and (f.hash or f.compare)
    ]
    t = PodTemplate(labels=(("app", "x"),))
    assert len(t.hashed_fields()) == len(hashed)
    assert t.hashed_fields() == tuple(getattr(t, name) for name in hashed)


def test_equal_templates_hash_alike_and_a_change_changes_it() -> None:
    a = PodTemplate(labels=(("app", "x"),), tolerations=(Toleration("k", "Exists", "", ""),))
    b = PodTemplate(labels=(("app", "x"),), tolerations=(Toleration("k", "Exists", "", ""),))
    assert a == b and hash(a) == hash(b)
    c = dataclasses.replace(a, resource_claims=(("gpu", "", "t"),))
    assert c != a and hash(c) == hash(c.hashed_fields()) != hash(a)
