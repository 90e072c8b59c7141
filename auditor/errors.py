"""The errors the tool raises on purpose, each with the exit code the CLI turns it into.

Adapters translate a library's exceptions where they call the library (PyYAML, git, the
kubernetes client, PyGithub, SQLAlchemy, smtplib) into one of these; `auditor.cli.main()` is the
one place that turns an exception into an exit code and one line on stderr:

- `UsageError`, `ConfigError` → 2: the command line or the config file is wrong; fix it and rerun.
- `AuditFailed` → 3: the audit itself failed or is partial (a remote, the store, a checkout).
- `RemoteError` (an `AuditFailed`): a remote system failed, either *temporarily* (retrying after
  `retry_after` seconds may succeed: a timeout, a 5xx, a rate limit) or *permanently* (a refused
  credential, a missing repository: retrying will not help). Retry logic reads `retry_after` and
  lives in one place (the service's runner), as kopf's TemporaryError / PermanentError do.
- anything else is a bug: the CLI exits 3 with `error: internal error: …` (the traceback with
  `--debug`), never 1, which means "findings found".
"""

from __future__ import annotations

from typing import ClassVar

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_FAILED = 0, 1, 2, 3
# 128 + SIGINT, as shells report a command stopped with Ctrl-C.
EXIT_INTERRUPTED = 130


class AuditorError(Exception):
    """Base of the errors the tool raises on purpose; `exit_code` is what the CLI exits with."""

    exit_code: ClassVar[int] = EXIT_FAILED


class UsageError(AuditorError):
    """The command line is wrong (exit 2)."""

    exit_code: ClassVar[int] = EXIT_USAGE


class ConfigError(UsageError, ValueError):
    """A setting is wrong: the file, line (0 when unknown) and key's path, and what is wrong (exit 2).

    Also a ValueError, as it was before this module existed."""

    def __init__(self, file: str, line: int, key: str, message: str) -> None:
        super().__init__(f"{file}:{line}: {key}: {message}" if line else f"{file}: {key}: {message}")
        self.file, self.line, self.key, self.message = file, line, key, message


class AuditFailed(AuditorError):
    """The audit could not be done, or only partly (exit 3)."""

    exit_code: ClassVar[int] = EXIT_FAILED


class RemoteError(AuditFailed):
    """A remote system failed. `retry_after`: seconds after which a retry may succeed (temporary),
    or None (permanent: the same request will fail the same way)."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    @property
    def temporary(self) -> bool:
        return self.retry_after is not None


class TemporaryRemoteError(RemoteError):
    """A timeout, a connection refused, a 5xx or a rate limit: retry after `retry_after` seconds."""

    def __init__(self, message: str, retry_after: float = 60.0) -> None:
        super().__init__(message, retry_after=retry_after)


class PermanentRemoteError(RemoteError):
    """A refused credential, a missing repository, a 4xx: retrying will not help."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retry_after=None)


def for_http_status(message: str, status: int | None, retry_after: float | None = None) -> RemoteError:
    """The error for a remote's HTTP answer: no answer (None), 408, 429 or 5xx are temporary
    (after the server's Retry-After when it sent one); any other status is permanent."""
    if status is None or status in (408, 429) or status >= 500:
        return TemporaryRemoteError(message, retry_after if retry_after is not None else 60.0)
    return PermanentRemoteError(message)
