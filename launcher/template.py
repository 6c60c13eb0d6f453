"""The chat template: a `.jinja` the stack (or RADIANCE_CHAT_TEMPLATE) points at, or the model's
bundled one where the stack says `chat_template: model`.

It is measurement-affecting (a benchmark's score can move by points between two templates of the
same model, and a bundled template can let answers run past the stop condition), so a missing,
unreadable or unparsable file fails the launch: there is no fallback to the model's bundled
template, because a silent fallback looks exactly like a kernel regression. Whichever template is
bound, the launcher names it with its sha256 (`describe`). In a container a file is addressed
through a mount the container already has, or bound read-only at its own path (mounts.py).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import jinja2

from radiance.launcher.mounts import Mount, covering


class TemplateError(ValueError):
    """The chat template cannot be used; the message says which file and why."""


def check_template(path: Path) -> str:
    """The template's text; TemplateError unless `path` is a readable file that parses as jinja2."""
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
    return text


@dataclass(frozen=True)
class BoundTemplate:
    """The template vLLM will apply: the file it lives in, its sha256, and how it was chosen."""

    file: Path  # the .jinja, or the model's tokenizer_config.json / chat_template.json holding it
    sha256: str  # of the template text itself
    origin: str  # "stack" | "env" | "model" | "" (unset: vLLM falls back to the model's own)

    def describe(self) -> str:
        how = {"stack": "from the stack's chat_template", "env": "from RADIANCE_CHAT_TEMPLATE",
               "model": "the model's bundled template (chat_template: model)",
               "": "the model's bundled template (chat_template unset)"}[self.origin]
        return f"{self.file} sha256 {self.sha256[:16]}, {how}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def bind_file(path: Path, origin: str) -> BoundTemplate:
    return BoundTemplate(path, _digest(check_template(path)), origin)


# Where transformers finds a checkpoint's own template, first match wins: a separate .jinja file
# (newer exports), the tokenizer config's `chat_template` key, a processor's chat_template.json.
BUNDLED_FILES = ("chat_template.jinja", "tokenizer_config.json", "chat_template.json")


def bundled_template(model: Path, origin: str) -> BoundTemplate | None:
    """The model directory's own chat template (None: it has none). A file that holds one but
    cannot be read or parsed is a TemplateError naming it."""
    for name in BUNDLED_FILES:
        f = model / name
        if not f.is_file():
            continue
        if f.suffix == ".jinja":
            return bind_file(f, origin)
        try:
            value = json.loads(f.read_text()).get("chat_template")
        except (OSError, ValueError, AttributeError) as e:
            raise TemplateError(f"{f} cannot be read as a JSON object: {e}") from None
        if not value:
            continue
        # tokenizer configs may hold several named templates: [{"name": ..., "template": ...}]
        texts = [value] if isinstance(value, str) else [t.get("template", "") for t in value if isinstance(t, dict)]
        for t in texts:
            try:
                jinja2.Environment().parse(t)
            except jinja2.TemplateSyntaxError as e:
                raise TemplateError(f"{f}: its chat_template is not a valid jinja2 template: {e.message}") from None
        return BoundTemplate(f, _digest(json.dumps(value, sort_keys=True) if not isinstance(value, str) else value),
                             origin)
    return None


def template_mount(template: Path | None, mounts: tuple[Mount, ...]) -> Mount | None:
    """The extra read-only bind a container needs for the template (None: already mounted/unset)."""
    if template is None or covering(mounts, template) is not None:
        return None
    return Mount(template, True)
