"""Named SQL: every statement lives in its own ``NAME.sql`` file of a package folder, so each
one can be found with grep. One loader for every statement set (the store's per dialect, the
destination kit's per dialect, the bench's)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable


@dataclass(frozen=True)
class Statements:
    """The ``.sql`` files of ``folder`` (slash-separated) inside the package ``package``."""

    package: str
    folder: str
    owner: str = "effectusd"  # who to name when a statement is missing

    def _folder(self) -> Traversable:
        path = files(self.package)
        for part in self.folder.split("/"):
            path = path / part
        return path

    def text(self, name: str) -> str:
        """The statement ``name``, without its trailing semicolon; LookupError if unknown."""
        return _text(self, name)

    def names(self) -> frozenset[str]:
        return _names(self)


@cache
def _text(statements: Statements, name: str) -> str:
    path = statements._folder() / f"{name}.sql"
    if not path.is_file():
        raise LookupError(
            f"{statements.owner} has no statement {statements.folder}/{name}.sql "
            f"(in {statements.package})"
        )
    return _without_comment_lines(path.read_text("utf-8")).strip().rstrip(";")


def _without_comment_lines(text: str) -> str:
    """The statement as sent: lines that are only a comment stay in the file for the reader.
    Shorter text is cheaper to send, and psycopg converts a statement's placeholders once and
    keeps the result only for texts up to 4,096 characters (the claim's, with its comments,
    is longer and was converted again on every call)."""
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))


@cache
def _names(statements: Statements) -> frozenset[str]:
    folder = statements._folder()
    return frozenset(item.name[:-4] for item in folder.iterdir() if item.name.endswith(".sql"))
