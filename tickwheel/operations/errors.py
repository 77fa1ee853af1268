"""What an operator command can fail with: one sentence and the exit code it maps to."""

from __future__ import annotations

EXIT_ENVIRONMENT = 1  # a service is unreachable, missing or refuses
EXIT_BAD_INPUT = 2  # the operator's input is wrong (click uses 2 for usage errors too)


class OperationsError(Exception):
    """A failure an operator can act on; its message is one sentence, printed as is."""

    exit_code = EXIT_ENVIRONMENT


class BadInput(OperationsError):
    """An argument or option that names nothing or has the wrong form."""

    exit_code = EXIT_BAD_INPUT


class Unavailable(OperationsError):
    """Kafka or Postgres cannot be reached, or lacks what the command needs."""

    exit_code = EXIT_ENVIRONMENT
