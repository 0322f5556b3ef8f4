"""Model-predictive-control planners: CEM and MPPI."""

from ._cem import CEMPlanner
from ._mppi import MPPIPlanner
from ._planner import MPCPlannerBase

__all__ = ["CEMPlanner", "MPCPlannerBase", "MPPIPlanner"]
