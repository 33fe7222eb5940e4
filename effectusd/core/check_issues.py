"""What a check reports: one issue per problem, all of them raised together."""

from __future__ import annotations

from dataclasses import dataclass

from effectusd.core.errors import PlanError


@dataclass(frozen=True)
class CheckIssue:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class PlanCheckError(PlanError):
    """The plan cannot be used; ``issues`` lists every problem found."""

    def __init__(self, issues: list[CheckIssue]) -> None:
        self.issues = issues
        super().__init__("\n".join(str(issue) for issue in issues))


def issues_from(problems: list[str]) -> list[CheckIssue]:
    """Issues from ``path: message`` strings, as the JSON and reference scanners word them."""
    issues = []
    for problem in problems:
        path, _, message = problem.rpartition(": ")
        issues.append(CheckIssue(path, message))
    return issues
