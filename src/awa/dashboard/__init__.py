"""The web dashboard served by ``awa serve``: Starlette + Jinja2 + htmx, no build step.

Pages (all refresh live by htmx polling): queues overview, queue detail with charts and
configured / override / effective values per live worker, jobs and job detail, runtime
instances, and the audit list of actions taken here. Actions (pause/resume, set/clear
overrides, retry failed, retry/cancel a job) are confirmed, CSRF-checked and audited;
``read_only`` turns them all off. Uses only awa's public API.

    from awa.dashboard import DashboardSettings, create_app
    app = create_app(DashboardSettings(database_url="postgresql://localhost/app"))
"""

from awa.extras import require

require("dashboard", "the dashboard")  # before Starlette is imported, to name the extra

from awa.dashboard.app import DashboardSettings, create_app  # noqa: E402  (after the check)

__all__ = ["DashboardSettings", "create_app"]
