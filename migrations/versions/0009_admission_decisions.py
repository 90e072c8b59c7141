"""admission_decisions: the admission webhook's answers, one per (cluster, request uid)

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06 09:00:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "admission_decisions",
        sa.Column("id", Id, nullable=False),
        sa.Column("cluster", sa.String(length=200), nullable=False),
        sa.Column("uid", sa.String(length=128), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("operation", sa.String(length=20), nullable=False),
        sa.Column("api_version", sa.String(length=320), nullable=False),
        sa.Column("kind", sa.String(length=120), nullable=False),
        sa.Column("namespace", sa.String(length=253), nullable=False),
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("user", sa.String(length=256), nullable=False),
        sa.Column("mode", sa.String(length=10), nullable=False),
        sa.Column("outcome", sa.String(length=20), nullable=False),
        sa.Column("dry_run", sa.Boolean(), nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        sa.Column("rules", sa.JSON(), nullable=False),
        sa.Column("groups", sa.JSON(), nullable=False),
        sa.Column("messages", sa.JSON(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("fingerprints", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_admission_decisions")),
        sa.UniqueConstraint("cluster", "uid", name=op.f("uq_admission_decisions_cluster_uid")),
    )
    # The web page and the API read one cluster's answers, or one outcome's, newest first.
    op.create_index(
        op.f("ix_admission_decisions_cluster_at"), "admission_decisions", ["cluster", "at"], unique=False
    )
    op.create_index(
        op.f("ix_admission_decisions_outcome_at"), "admission_decisions", ["outcome", "at"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_admission_decisions_outcome_at"), table_name="admission_decisions")
    op.drop_index(op.f("ix_admission_decisions_cluster_at"), table_name="admission_decisions")
    op.drop_table("admission_decisions")
