"""findings.labels: the workload's metadata.labels (digests route teams by label)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02 19:45:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable: rows stored before this revision get their labels when their workload is next seen.
    with op.batch_alter_table("findings", schema=None) as batch_op:
        batch_op.add_column(sa.Column("labels", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("findings", schema=None) as batch_op:
        batch_op.drop_column("labels")
