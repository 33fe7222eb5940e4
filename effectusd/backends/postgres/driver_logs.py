"""psycopg's and psycopg_pool's own log lines (a pool that cannot connect, a connection it
discards) with their arguments reduced before any handler formats them: an error to its class
and SQLSTATE (``failure_name``), any other object (a connection, whose repr names the host, the
user and the database) to its type's name, and no traceback. The driver's texts may name the
server, the user or part of the connection string; ours never do."""

from __future__ import annotations

import logging

from effectusd.backends.errors import failure_name

DRIVER_LOGGERS = ("psycopg", "psycopg.pool")


class DriverTextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(_plain(arg) for arg in record.args)
        record.exc_info, record.exc_text = None, None
        return True


def _plain(value: object) -> object:
    if isinstance(value, BaseException):
        return failure_name(value)
    if value is None or isinstance(value, str | int | float):
        return value  # the pool's name, counts, durations
    return type(value).__name__


_FILTER = DriverTextFilter()


def quiet_driver_logs() -> None:
    """Reduce the driver's log lines from now on, in this process (idempotent)."""
    for name in DRIVER_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
