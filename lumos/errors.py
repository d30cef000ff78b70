"""Errors a user can fix: printed by the CLI as one line, exit status 2."""


class UserError(Exception):
    """Bad arguments, a missing optional dependency, an impossible configuration."""
