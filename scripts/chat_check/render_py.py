"""Second reference for agrl/chat: renders gen.mjs's cases with Python's jinja2.

gen.mjs pipes the cases in on stdin as JSON ({"templates": {file: text}, "cases": [...]}) and
reads one result per case back from stdout ({"text": ...} or {"error": ...}). The environment
is set up the way Hugging Face transformers sets up its chat-template environment (a sandbox
with trim_blocks and lstrip_blocks, a tojson filter that keeps non-ASCII text and the insertion
order of keys, raise_exception and strftime_now), which is what the models met in training.
"""

import datetime
import json
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment


def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def strftime_now(fmt):
    return datetime.datetime.now().strftime(fmt)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    job = json.load(sys.stdin)
    env = environment()
    compiled = {name: env.from_string(text) for name, text in job["templates"].items()}
    out = []
    for case in job["cases"]:
        try:
            out.append({"text": compiled[case["template"]].render(**case["context"])})
        except Exception as err:  # a template's raise_exception, or a rendering failure
            out.append({"error": f"{type(err).__name__}: {err}"})
    json.dump({"jinja2": jinja2.__version__, "python": sys.version.split()[0], "results": out},
              sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
