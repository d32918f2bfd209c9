"""The built component (``./build.sh`` first), run by ``reconhost render`` on the fixtures: what the
host itself would do with it. ``reconhost`` is taken from $RECONHOST, or from PATH."""

import json
import os
import pathlib
import subprocess

HERE = pathlib.Path(__file__).resolve().parent
COMPONENT = HERE / "build" / "{{name}}.wasm"


def render(fixture):
    assert COMPONENT.is_file(), f"{COMPONENT} is missing: run ./build.sh first"
    reconhost = os.environ.get("RECONHOST", "reconhost")
    return subprocess.run(
        [reconhost, "render", "--plugin", str(COMPONENT), "--parent", str(HERE / "fixtures" / fixture), "-o", "json"],
        capture_output=True,
        text=True,
    )


def test_the_component_should_render_a_config_map_for_the_fixture():
    done = render("parent.yaml")
    assert done.returncode == 0, done.stderr
    rendered = json.loads(done.stdout)
    [child] = rendered["children"]
    assert child["action"] == "create"
    assert child["object"]["data"] == {"message": "hello"}
    assert rendered["conditions"][0]["status"] == "True"


def test_the_component_should_refuse_the_invalid_fixture():
    done = render("invalid.yaml")
    assert done.returncode != 0
    assert "spec.message must not be empty" in done.stderr
