"""The statements of API keys: a user's org, the projects of an org, a key's insert and revoke
(:mod:`app.domain.keys`)."""

from __future__ import annotations

from sqlalchemy import text

USER_ORG_SQL = text("/* sibyl:keys.user */ SELECT org_id, role FROM users WHERE id = :user_id")
PROJECTS_IN_ORG_SQL = text(
    """/* sibyl:keys.projects */
SELECT id FROM projects WHERE org_id = :org_id AND id = ANY(CAST(:ids AS text[]))"""
)
INSERT_KEY_SQL = text(
    """/* sibyl:keys.create */
INSERT INTO api_keys (id, org_id, user_id, key_hash, scopes, project_ids, label)
VALUES (:id, :org_id, :user_id, :key_hash, CAST(:scopes AS text[]),
        CAST(:project_ids AS text[]), :label)"""
)
REVOKE_KEY_SQL = text(
    """/* sibyl:keys.revoke */
UPDATE api_keys SET revoked_at = now() WHERE id = :id AND revoked_at IS NULL RETURNING id"""
)
