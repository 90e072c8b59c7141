"""docs/security.md's identity-provider examples are configs the loader takes as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from auditor.settings.config import load_settings

DOC = Path(__file__).resolve().parents[1] / "docs" / "security.md"
EXAMPLES = [b for b in re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S) if b.startswith("service:")]


def test_the_page_has_the_three_providers() -> None:
    assert len(EXAMPLES) == 3
    assert {"keycloak.example.com", "dex.example.com", "token.actions.githubusercontent.com"} <= {
        m for b in EXAMPLES for m in re.findall(r"https://([^/\s]+)", b)
    }


@pytest.mark.parametrize("example", EXAMPLES, ids=["keycloak", "dex", "github-actions"])
def test_each_example_loads(tmp_path: Path, example: str) -> None:
    path = tmp_path / "auditor.yaml"
    path.write_text(example)
    auth = load_settings(path).service.auth
    assert auth is not None and auth.issuer.startswith("https://") and auth.teams
    assert set(auth.algorithms) <= {
        "RS256",
        "ES256",
        "RS384",
        "RS512",
        "ES384",
        "ES512",
        "PS256",
        "PS384",
        "PS512",
        "EdDSA",
    }
