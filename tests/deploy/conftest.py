import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from deploysupport import OVERLAYS, kubectl, render


@pytest.fixture(scope="session")
def rendered() -> dict[str, list[dict]]:
    """Both overlays rendered with the real `kubectl kustomize`."""
    if kubectl() is None:
        pytest.skip("kubectl is not installed (.ci/run installs the Debian package kubectl)")
    return {name: render(path) for name, path in OVERLAYS.items()}
