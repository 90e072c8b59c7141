"""index findings.resolved_at (`since` on resolved findings) and (target_id, id) (a target's pages)

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02 16:40:00

"""

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("findings", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_findings_resolved_at"), ["resolved_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_findings_target_id_id"), ["target_id", "id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("findings", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_findings_target_id_id"))
        batch_op.drop_index(batch_op.f("ix_findings_resolved_at"))
