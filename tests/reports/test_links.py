"""Links to a file at the audited revision, per Git host URL pattern."""

from __future__ import annotations

import pytest

from auditor.reports.links import file_url

SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize(
    ("remote", "expected"),
    [
        ("https://github.com/acme/infra.git", f"https://github.com/acme/infra/blob/{SHA}/k8s/job.yaml#L7"),
        ("git@github.com:acme/infra.git", f"https://github.com/acme/infra/blob/{SHA}/k8s/job.yaml#L7"),
        ("ssh://git@github.com:22/acme/infra", f"https://github.com/acme/infra/blob/{SHA}/k8s/job.yaml#L7"),
        # A token in the URL never reaches the page.
        (
            "https://x-access-token:s3cret@github.example.com/acme/infra.git",
            f"https://github.example.com/acme/infra/blob/{SHA}/k8s/job.yaml#L7",
        ),
        (
            "https://gitlab.com/acme/platform/infra.git",
            f"https://gitlab.com/acme/platform/infra/-/blob/{SHA}/k8s/job.yaml#L7",
        ),
        (
            "git@gitlab.internal:acme/infra.git",
            f"https://gitlab.internal/acme/infra/-/blob/{SHA}/k8s/job.yaml#L7",
        ),
        ("https://bitbucket.org/acme/infra.git", None),  # a host whose pattern we do not know
        ("/srv/git/infra.git", None),  # a local path
        ("file:///srv/git/infra.git", None),
        ("https://github.com/acme/infra/extra.git", None),  # not OWNER/REPO
    ],
)
def test_remote_patterns(remote: str, expected: str | None) -> None:
    assert file_url(remote, SHA, "k8s/job.yaml", 7) == expected


def test_no_link_without_a_revision_or_for_paths_outside_the_checkout() -> None:
    remote = "https://github.com/acme/infra.git"
    assert file_url(remote, None, "k8s/job.yaml", 7) is None
    assert file_url(remote, "main; rm -rf /", "k8s/job.yaml", 7) is None
    assert file_url(remote, SHA, "/tmp/checkout/k8s/job.yaml", 7) is None
    assert file_url(remote, SHA, "../secrets.yaml", 7) is None
    assert (
        file_url(remote, SHA, "k8s/a b#c.yaml", 0)
        == f"https://github.com/acme/infra/blob/{SHA}/k8s/a%20b%23c.yaml"
    )
