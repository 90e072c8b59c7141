"""digests.message_id (a stable Message-ID per team and day); pull_requests by fix id

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03 09:00:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable: a digest queued before this revision gets the Message-ID derived from its team and day.
    with op.batch_alter_table("digests", schema=None) as batch_op:
        batch_op.add_column(sa.Column("message_id", sa.String(length=255), nullable=True))
    with op.batch_alter_table("pull_requests", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_pull_requests_target_id_fix_id"), ["target_id", "fix_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("pull_requests", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_pull_requests_target_id_fix_id"))
    with op.batch_alter_table("digests", schema=None) as batch_op:
        batch_op.drop_column("message_id")
