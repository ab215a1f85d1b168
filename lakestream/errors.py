"""The one error root: every failure lakestream reports to a user is a :class:`LakestreamError`.

Each family of errors says once, on its base class, how it ends a command: its exit code and how its
message is presented. :func:`exit_status` reads that for the ``lakestream`` command and for the demo's
job process, so both end the same error the same way; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from typing import ClassVar

#: Exit code of bad input or setup: nothing ran, fix the input and run again.
BAD_INPUT = 2
#: Exit code of work that ran and failed, lost a conflict, or found differences.
FAILED = 1


class LakestreamError(Exception):
    """A failure with a message for the user; the class attributes say how it ends a command.

    ``exit_code`` is :data:`BAD_INPUT` or :data:`FAILED`; ``names_command`` puts the sub-command in the
    message's prefix (``lakestream ingest: ...``) rather than the program alone (``lakestream: ...``), for
    errors of the installation or configuration that are the same whichever command meets them;
    ``preface`` comes before the message (``configuration error: ``). ``fix``, when given, is the way on
    and ends the message.
    """

    exit_code: ClassVar[int] = BAD_INPUT
    names_command: ClassVar[bool] = True
    preface: ClassVar[str] = ""
    fix: str | None = None

    def __init__(self, *args: object, fix: str | None = None) -> None:
        if fix is not None:
            message = str(args[0]) if args else ""
            joint = "" if not message else " " if message.endswith(".") else ". "
            args = (f"{message}{joint}Fix: {fix}", *args[1:])
            self.fix = fix
        super().__init__(*args)


def exit_status(exc: BaseException, command: str) -> tuple[int, str] | None:
    """The exit code and message of ``exc`` ending sub-command ``command``; None if it is not ours."""
    if not isinstance(exc, LakestreamError):
        return None
    program = f"lakestream {command}" if exc.names_command else "lakestream"
    return exc.exit_code, f"{program}: {exc.preface}{exc}"
