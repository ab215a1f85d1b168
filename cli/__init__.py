"""The ``lakestream`` command line: one ``cmd_*`` module per sub-command, put together by ``cli.main``."""
