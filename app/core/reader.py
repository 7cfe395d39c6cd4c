"""The reader: the authenticated principal of a request, resolved once from its API key.

The readable project set is computed once per request (rule: readable-project-set) and then bound as
an array parameter into every read statement through :mod:`app.repo.readrule`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reader:
    """Who is reading, and what they may read.

    - ``readable_projects``: org-visible projects ∪ member projects (∪ all projects for org owners
      and admins), intersected with the key's project list when the key is restricted.
    - ``restricted``: the key is restricted to projects, so rows outside every project (org-scoped
      memories, private memories without a project) are not readable.
    """

    org_id: str
    user_id: str
    org_role: str
    scopes: frozenset[str]
    readable_projects: tuple[str, ...]
    restricted: bool
    key_id: str | None = None

    def params(self) -> dict[str, object]:
        """The bound parameters of the read-rule fragment (``:r_org`` ... ``:r_restricted``)."""
        return {
            "r_org": self.org_id,
            "r_user": self.user_id,
            "r_projects": list(self.readable_projects),
            "r_restricted": self.restricted,
        }

    def can_read_project(self, project_id: str) -> bool:
        """True iff ``project_id`` is in the readable project set."""
        return project_id in self.readable_projects
