"""service.broker and service.github_app: typed, validated once, errors naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from auditor.errors import ConfigError
from auditor.settings.config import load_settings


def _load(tmp_path: Path, service: str) -> object:
    path = tmp_path / "auditor.yaml"
    path.write_text("service:\n" + service)
    return load_settings(path)


def test_defaults_and_values(tmp_path: Path) -> None:
    settings = _load(
        tmp_path,
        "  broker: {url: 'redis://127.0.0.1:6380/0', lease_seconds: 30}\n"
        "  github_app: {app_id: 5, private_key_file: app.pem, fail_on: critical}\n",
    )
    broker = settings.service.broker  # type: ignore[attr-defined]
    assert broker.url == "redis://127.0.0.1:6380/0" and broker.lease_seconds == 30
    assert broker.visibility_timeout_seconds == 3600 and broker.queue == "auditor"
    assert "redis" not in repr(broker)  # the URL may carry a password
    app = settings.service.github_app  # type: ignore[attr-defined]
    assert app.private_key_file == str(tmp_path / "app.pem") and app.fail_on == "critical"
    assert app.secret({"AUDITOR_WEBHOOK_SECRET": "s"}) == "s"
    assert broker.resolved_url({"AUDITOR_BROKER_URL": "amqp://mq/"}) == "amqp://mq/"
    plain = _load(tmp_path, "  port: 8081\n")
    assert plain.service.broker is None and plain.service.github_app is None  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("service", "key"),
    [
        ("  broker: {url: 'http://x'}\n", "service.broker.url"),
        ("  broker: {lease_seconds: 0}\n", "service.broker.lease_seconds"),
        ("  broker: {visiblity_timeout_seconds: 5}\n", "service.broker.visiblity_timeout_seconds"),
        ("  broker: {queue: 'a b'}\n", "service.broker.queue"),
        ("  github_app: {app_id: 5}\n", "service.github_app"),
        ("  github_app: {app_id: 5, private_key_file: k, fail_on: severe}\n", "service.github_app.fail_on"),
        (
            "  github_app: {app_id: 5, private_key_file: k, clone_url: 'https://x/y.git'}\n",
            "service.github_app.clone_url",
        ),
        (
            "  github_app: {app_id: 5, private_key_file: k, max_delivery_age_seconds: -1}\n",
            "service.github_app.max_delivery_age_seconds",
        ),
    ],
)
def test_bad_settings_name_the_key(tmp_path: Path, service: str, key: str) -> None:
    with pytest.raises(ConfigError) as exc:
        _load(tmp_path, service)
    assert key in str(exc.value) or getattr(exc.value, "key", "") == key


def test_worker_needs_a_broker(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from auditor import cli

    path = tmp_path / "auditor.yaml"
    path.write_text("service: {port: 8081}\n")
    assert cli.main(["worker", "--config", str(path)]) == 2
    assert "service.broker" in capsys.readouterr().err
