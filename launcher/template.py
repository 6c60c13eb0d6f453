"""The chat template: a `.jinja` the stack (or RADIANCE_CHAT_TEMPLATE) points at.

It is measurement-affecting (the seed's GSM8K band is template-bound), so a missing, unreadable or
unparsable file fails the launch: there is no fallback to the model's bundled template, because a
silent fallback looks exactly like a kernel regression. In a container it is addressed through a
mount the container already has, or bound read-only at its own path (mounts.py).
"""

from __future__ import annotations

from pathlib import Path

import jinja2

from radiance.launcher.mounts import Mount, covering


class TemplateError(ValueError):
    """The chat template cannot be used; the message says which file and why."""


def check_template(path: Path) -> None:
    """Raise TemplateError unless `path` is a readable file that parses as a jinja2 template."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise TemplateError(f"chat template {path} does not exist") from None
    except IsADirectoryError:
        raise TemplateError(f"chat template {path} is a directory, not a .jinja file") from None
    except PermissionError:
        raise TemplateError(f"chat template {path} is not readable (permission denied)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise TemplateError(f"chat template {path} cannot be read: {e}") from None
    try:
        jinja2.Environment().parse(text)
    except jinja2.TemplateSyntaxError as e:
        raise TemplateError(f"chat template {path}:{e.lineno}: not a valid jinja2 template: {e.message}") from None


def template_mount(template: Path | None, mounts: tuple[Mount, ...]) -> Mount | None:
    """The extra read-only bind a container needs for the template (None: already mounted/unset)."""
    if template is None or covering(mounts, template) is not None:
        return None
    return Mount(template, True)
