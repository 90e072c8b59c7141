"""fleet: runs.task_key (idempotent tasks), target leases, webhook deliveries, check runs, App repositories

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03 12:45:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("task_key", sa.String(length=200), nullable=True))
        batch_op.create_index(batch_op.f("ix_runs_task_key"), ["task_key"], unique=True)
    op.create_table(
        "target_leases",
        sa.Column("target", sa.String(length=200), nullable=False),
        sa.Column("owner", sa.String(length=255), nullable=False),
        sa.Column("task_key", sa.String(length=200), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("target", name=op.f("pk_target_leases")),
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("delivery_id", sa.String(length=100), nullable=False),
        sa.Column("event", sa.String(length=60), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("delivery_id", name=op.f("pk_webhook_deliveries")),
    )
    op.create_index(
        op.f("ix_webhook_deliveries_expires_at"), "webhook_deliveries", ["expires_at"], unique=False
    )
    op.create_table(
        "check_runs",
        sa.Column("id", Id, nullable=False),
        sa.Column("repository", sa.String(length=255), nullable=False),
        sa.Column("head_sha", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=60), nullable=False),
        sa.Column("check_run_id", sa.BigInteger(), nullable=True),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("conclusion", sa.String(length=30), nullable=True),
        sa.Column("annotations_sent", sa.Integer(), nullable=False),
        sa.Column("task_key", sa.String(length=200), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_check_runs")),
        sa.UniqueConstraint(
            "repository", "head_sha", "kind", name=op.f("uq_check_runs_repository_head_sha_kind")
        ),
    )
    op.create_table(
        "app_repositories",
        sa.Column("full_name", sa.String(length=255), nullable=False),
        sa.Column("installation_id", sa.BigInteger(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("full_name", name=op.f("pk_app_repositories")),
    )


def downgrade() -> None:
    op.drop_table("app_repositories")
    op.drop_table("check_runs")
    op.drop_index(op.f("ix_webhook_deliveries_expires_at"), table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
    op.drop_table("target_leases")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runs_task_key"))
        batch_op.drop_column("task_key")
