"""The load shape: ``level`` background users plus the canary user, stage by stage, until the last quota is met.

Why: the scenario, not ``--users``/``--spawn-rate``/``--run-time``, decides the levels (docs/design.md,
"Locust traps"); the coordinator's stage tracker says which stage the run is in, and this shape only
turns it into Locust's user count. It ticks in the master or the only process, and its first tick,
which comes before ``test_start``, is what prepares the run (``CoordinatorSide.current``).
"""

from __future__ import annotations

import logging

from locust import LoadTestShape, User

from loadgen.core.errors import LoadgenError
from loadgen.load.background_user import BackgroundUser
from loadgen.load.coordinator import coordinator_side
from loadgen.load.stages import users_for
from loadgen.load.users import CANARY_USERS, CanaryUser

log = logging.getLogger("loadgen")


class LevelShape(LoadTestShape):
    """Holds ``level`` background users plus the canary user; stops when the last stage's quota is met."""

    use_common_options = False

    def tick(self) -> tuple[int, float, list[type[User]]] | None:
        env = self.runner.environment if self.runner else None
        if env is None:
            return None
        try:
            st = coordinator_side(env).current()
        except LoadgenError as exc:
            log.error("%s", exc)
            return None
        tracker = st.coordinator.tracker
        users = users_for(tracker.current, CANARY_USERS)
        if users is None:
            return None
        return users, st.spawn_rate, [CanaryUser, BackgroundUser]
