"""Where the control plane's secrets come from: files (mode 0600) or the environment, never a command line,
which other users of the host can read in /proc (docs/protocol.md, section 7, "Authentication").

The ground floor of the control plane's security: `auth` and `policy` read tokens through it, `tls`
checks its private key with it; it imports none of them.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Mapping
from pathlib import Path

logger = logging.getLogger("ina.control")

TOKEN = "INA_TOKEN"
TOKEN_FILE = "INA_TOKEN_FILE"


def check_private(path: str | os.PathLike[str], what: str) -> None:
    """Warn when users other than the owner may read the secret file `path` (`what` names it in the warning)."""
    try:
        mode = Path(path).stat().st_mode
    except OSError:
        return  # the caller's read reports it
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        logger.warning("%s %s is readable by other users: chmod 600 it", what, path)


def read_token_file(path: str | os.PathLike[str], what: str = "token file") -> str:
    """The token in `path` (surrounding whitespace stripped); warns when others may read the file."""
    path = Path(path)
    try:
        token = path.read_text().strip()
    except OSError as error:
        raise ValueError(f"{what} {path}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{what} {path}: not text") from None
    if not token:
        raise ValueError(f"{what} {path} is empty")
    check_private(path, what)
    return token


def token_from_environment(environ: Mapping[str, str] = os.environ) -> str | None:
    """The token named by INA_TOKEN_FILE (a path), else INA_TOKEN, else None."""
    if environ.get(TOKEN_FILE):
        return read_token_file(environ[TOKEN_FILE])
    return environ.get(TOKEN) or None
