"""the API's writes: suppressions, findings' acknowledgement, a target's schedule set through the API

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07 20:30:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "suppressions",
        sa.Column("id", Id, nullable=False),
        sa.Column("target_id", Id, nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("rule", sa.String(length=120), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("expires", sa.Date(), nullable=False),
        sa.Column("created_by", sa.String(length=256), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["target_id"], ["targets.id"], name=op.f("fk_suppressions_target_id_targets"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_suppressions")),
        sa.UniqueConstraint("target_id", "fingerprint", name=op.f("uq_suppressions_target_id_fingerprint")),
    )
    with op.batch_alter_table("findings") as batch:
        batch.add_column(sa.Column("acknowledged_by", sa.String(length=256), nullable=True))
        batch.add_column(sa.Column("acknowledged_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("acknowledgement_note", sa.Text(), nullable=True))
    with op.batch_alter_table("targets") as batch:
        batch.add_column(sa.Column("schedule_override", sa.String(length=120), nullable=True))
        batch.add_column(sa.Column("schedule_changed_by", sa.String(length=256), nullable=True))
        batch.add_column(sa.Column("schedule_changed_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("targets") as batch:
        batch.drop_column("schedule_changed_at")
        batch.drop_column("schedule_changed_by")
        batch.drop_column("schedule_override")
    with op.batch_alter_table("findings") as batch:
        batch.drop_column("acknowledgement_note")
        batch.drop_column("acknowledged_at")
        batch.drop_column("acknowledged_by")
    op.drop_table("suppressions")
