"""the App's scheduled audits: app_repositories' branch, ETag and audited SHA; targets.retired_at

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07 21:50:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("app_repositories") as batch:
        batch.add_column(sa.Column("default_branch", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("branch_etag", sa.String(length=200), nullable=True))
        batch.add_column(sa.Column("audited_sha", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("checked_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("targets") as batch:
        batch.add_column(sa.Column("retired_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("targets") as batch:
        batch.drop_column("retired_at")
    with op.batch_alter_table("app_repositories") as batch:
        batch.drop_column("checked_at")
        batch.drop_column("audited_sha")
        batch.drop_column("branch_etag")
        batch.drop_column("default_branch")
