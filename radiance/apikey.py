"""The server's API key: read from the stack's `api_key_file`, never put on a command line.

Delivery: a native unit loads the file as the systemd credential `vllm-api-key` (LoadCredential=,
so `systemctl show` names only the path) and radiance-launch turns it into `VLLM_API_KEY` for
vLLM; a podman unit makes it a podman secret handed to the container as `VLLM_API_KEY`. Probes,
the exporter and vllm-switch read the same file (or the credential) and send `Authorization:
Bearer`. The key itself is never logged, printed, or passed in argv.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

CREDENTIAL = "vllm-api-key"  # systemd credential name (LoadCredential=, %d/vllm-api-key)
ENV_VAR = "VLLM_API_KEY"  # what vLLM reads when no --api-key is given
REDACTED = "<redacted>"


class ApiKeyError(ValueError):
    """The key file cannot be used; the message names it (never the key)."""


def read_key(path: Path, what: str = "api_key_file") -> str:
    """The key in `path`: one line, surrounding whitespace stripped."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ApiKeyError(f"{what} {path}: cannot read it ({e.strerror or e}); create it (one line, the key) "
                          f"readable by whoever runs this") from None
    key = text.strip()
    if not key:
        raise ApiKeyError(f"{what} {path}: the file is empty; put the key on its first line")
    if "\n" in key or any(c.isspace() for c in key):
        raise ApiKeyError(f"{what} {path}: the key must be one word on one line")
    return key


def stack_key_file(sf, name: str) -> Path | None:
    """The stack's `api_key_file` as a path (relative = beside the stack file), or None."""
    from radiance.locations import stack_paths

    return stack_paths(sf, sf.get(name), os.environ).api_key_file


def stack_key(sf, name: str) -> str | None:
    """The key the stack's server wants (for probes, the exporter, vllm-switch), or None."""
    f = stack_key_file(sf, name)
    return read_key(f) if f else None


def credential_path(environ: Mapping[str, str]) -> Path | None:
    """`$CREDENTIALS_DIRECTORY/vllm-api-key` when systemd passed the credential to this process."""
    d = environ.get("CREDENTIALS_DIRECTORY")
    p = Path(d) / CREDENTIAL if d else None
    return p if p is not None and p.is_file() else None


def launch_env(key_file: Path | None, runtime: str, environ: Mapping[str, str]) -> tuple[dict[str, str], str]:
    """({VLLM_API_KEY: key} or {}, where it came from) for radiance-launch to hand to vLLM.

    In a container the unit already set VLLM_API_KEY from a podman secret; natively the unit's
    credential is read, else (a launch by hand) the stack's file itself.
    """
    if key_file is None:
        return {}, ""
    if runtime == "podman":
        if not environ.get(ENV_VAR):
            raise ApiKeyError(f"the stack has api_key_file {key_file} but this container got no {ENV_VAR}: start it "
                              f"through its unit (which hands the key over as a podman secret)")
        return {}, f"{ENV_VAR} from the container's podman secret"
    cred = credential_path(environ)
    if cred is not None:
        return {ENV_VAR: read_key(cred, "systemd credential")}, f"systemd credential {CREDENTIAL}"
    return {ENV_VAR: read_key(key_file)}, str(key_file)


def bearer(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def from_env(name: str, environ: Mapping[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    key = (environ.get(name) or "").strip()
    if not key:
        raise ApiKeyError(f"environment variable {name} is not set or empty")
    return key
