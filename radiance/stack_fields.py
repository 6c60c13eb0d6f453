"""What a string in the stack file may hold: the field types of radiance.stack's schema.

Stack-file strings end up in root-owned systemd units, podman command lines and vLLM's argv. So
every string is refused when it holds a control character (a newline in an `env:` value would be a
new unit line), and the strings that become names or command words are held to the pattern of what
they name: a container name as podman allows it, an image as an OCI reference (never something
starting with `-`, which podman would read as a flag), a bind address as an IP address, a served
model name without whitespace. The renderer quotes every value as well (deploy/render.py); these
checks make the error name the file, line and key instead.

The API key must never be on a command line: `extra_args` is refused when it holds any spelling
vLLM's own argument parser reads as `--api-key` (`--api_key`, the `=` forms, unambiguous prefixes).
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, WithJsonSchema

from radiance.knobs import KNOBS

# Unicode "Cc" (C0, DEL, C1) plus the two separators some editors and tools treat as line breaks.
_LINE_SEPARATORS = ("\u2028", "\u2029")
TEXT_PATTERN = r"^[^\x00-\x1f\x7f-\x9f\u2028\u2029]*$"  # the same rule, for the JSON Schema
CONTAINER_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,252}$")  # podman's container name rule
# An OCI image reference (the distribution reference grammar): [domain[:port]/]path[:tag][@digest].
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?"
IMAGE_RE = re.compile(rf"^(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::[\w][\w.-]{{0,127}})?"
                      r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$")
SERVED_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,255}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
API_KEY_OPTION = "--api-key"
# vLLM's parser takes unambiguous prefixes of its options; `--api-k` is the shortest that only
# `--api-key` starts with (`--api-` is shared with `--api-server-count`).
_API_KEY_SHORTEST = "--api-k"

# An API key given here would land in `ps`, `systemctl show`, the journal and --dry-run.
SECRET_HINT = ("would show in ps, systemctl show, the journal and --dry-run; put the key in a file and name it "
               "in `api_key_file`")


def control_character(s: str) -> str | None:
    """The first control character of `s`, described (`'\\n' at position 3`), or None."""
    for i, c in enumerate(s):
        if unicodedata.category(c) == "Cc" or c in _LINE_SEPARATORS:
            return f"{c!r} at position {i}"
    return None


def refuse_control(v: str, consequence: str) -> str:
    """`v`, or ValueError naming its first control character and `consequence`."""
    bad = control_character(v)
    if bad:
        raise ValueError(f"contains a control character ({bad}); {consequence}")
    return v


def _text(v: str) -> str:
    return refuse_control(v, "stack-file strings go into systemd units and command lines, where it would start a "
                             "new line or command: remove it")


def _pattern_json(pattern: str) -> WithJsonSchema:
    return WithJsonSchema({"type": "string", "pattern": pattern})


Text = Annotated[str, AfterValidator(_text), _pattern_json(TEXT_PATTERN)]


def _matching(pattern: re.Pattern[str], what: str):
    def check(v: str) -> str:
        if not pattern.match(v):
            raise ValueError(f"{v!r} {what}")
        return v
    return check


_container = _matching(CONTAINER_RE, "is not a podman container name: letters, digits, '_', '.' and '-', starting "
                                     "with a letter or digit")
_image = _matching(IMAGE_RE, "is not an image reference: [registry/]path[:tag][@digest] in lowercase, e.g. "
                             "localhost/radiance-rocm:latest")
_served_name = _matching(SERVED_NAME_RE, "is no served model name: letters, digits and . _ : / @ + - (no spaces), "
                                         "starting with a letter or digit")


def _host(v: str) -> str:
    try:
        ipaddress.ip_address(v)
    except ValueError:
        raise ValueError(f"{v!r} is not an IP address: the address vLLM listens on and podman publishes the "
                         f"port on (e.g. 127.0.0.1, 0.0.0.0 or ::)") from None
    return v


ContainerName = Annotated[str, AfterValidator(_container), _pattern_json(CONTAINER_RE.pattern)]
ImageRef = Annotated[str, AfterValidator(_image), _pattern_json(IMAGE_RE.pattern)]
# for editors: an IPv4 dotted quad or an IPv6 address (the loader's ipaddress check is exact)
_IP_PATTERN = r"^([0-9]{1,3}(\.[0-9]{1,3}){3}|[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*)$"
BindHost = Annotated[str, AfterValidator(_host), _pattern_json(_IP_PATTERN)]
ServedName = Annotated[str, AfterValidator(_served_name), _pattern_json(SERVED_NAME_RE.pattern)]


def _env_name(k: str) -> str:
    if not ENV_NAME_RE.match(k):
        raise ValueError(f"{k!r} is not an environment variable name")
    if k == "VLLM_API_KEY":
        raise ValueError(f"VLLM_API_KEY in `env` {SECRET_HINT}")
    if k.startswith("RADIANCE_") and k not in KNOBS:
        raise ValueError(f"{k} is not a radiance knob (see docs/knobs.md)")
    return k


def _env_value(v: Any) -> Any:
    # YAML reads `2` and `true` as numbers/booleans; the environment only holds strings.
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v) if isinstance(v, (int, float)) else v


EnvName = Annotated[str, AfterValidator(_env_name), _pattern_json(ENV_NAME_RE.pattern)]
# YAML's `2` and `true` are taken (and made strings): the schema says so, for editors.
EnvValue = Annotated[Text, BeforeValidator(_env_value),
                     WithJsonSchema({"type": ["string", "number", "boolean"], "pattern": TEXT_PATTERN})]
EnvMap = Annotated[dict[EnvName, EnvValue], Field(json_schema_extra={"propertyNames": {"pattern": ENV_NAME_RE.pattern}})]
OptionValue = Text | int | float | bool


def is_api_key_option(arg: str) -> bool:
    """True for every spelling vLLM's parser reads as `--api-key`: underscores for dashes, `=VALUE`
    or not, and unambiguous prefixes (argparse's abbreviations)."""
    if not arg.startswith("--"):
        return False
    name = arg.split("=", 1)[0]
    name = "--" + name[2:].replace("_", "-")
    return name.startswith(_API_KEY_SHORTEST) and API_KEY_OPTION.startswith(name)


def _no_api_key_arg(args: list[str]) -> list[str]:
    bad = [a.split("=", 1)[0] for a in args if is_api_key_option(a)]
    if bad:
        raise ValueError(f"{bad[0]} (vLLM reads it as --api-key) in `extra_args` {SECRET_HINT}")
    return args


ExtraArgs = Annotated[list[Text], AfterValidator(_no_api_key_arg)]
