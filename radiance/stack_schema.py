"""The stack file's JSON Schema, for editors (YAML language servers validate and complete with it).

Generated from the same pydantic models `load_stacks` validates with, so an editor flags what the
loader refuses: unknown keys, values out of range, a control character in a string, an image that
is no image reference. Cross-field rules (a podman stack needs `image`, a GPU arch needs `devices`)
are the loader's alone. `deploy/stacks.schema.json` is this output (tests/test_docs.py keeps them
equal); the example stack file names it on its first line. `radiance stack-schema` prints it.
"""

from __future__ import annotations

import json

from radiance.stack import StackFile

SCHEMA_ID = "https://json-schema.org/draft/2020-12/schema"


def schema() -> dict:
    return {"$schema": SCHEMA_ID, "title": "radiance stack file", **StackFile.model_json_schema()}


def text() -> str:
    return json.dumps(schema(), indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(text(), end="")
