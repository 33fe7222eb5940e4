"""effectusd: a transactional-outbox saga dispatcher."""

from effectusd.client import AsyncClient, Client, SubmitResult
from effectusd.core.checker import CheckIssue, PlanCheckError, check
from effectusd.core.plan import CheckedPlan, PlanSpec
from effectusd.core.submission import SubmitConflict, SubmitError

__all__ = [
    "AsyncClient",
    "CheckIssue",
    "CheckedPlan",
    "Client",
    "PlanCheckError",
    "PlanSpec",
    "SubmitConflict",
    "SubmitError",
    "SubmitResult",
    "check",
]
__version__ = "0.1.0"
