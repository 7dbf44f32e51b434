"""Kubernetes objects checked against the API's schemas, offline (issue 42, point 3).

The schemas are third_party/kubernetes-schemas/k8s-api.json: the types of Kubernetes 1.36.0's
OpenAPI spec (and the Prometheus operator's monitors) as the npm package kubernetes-models
declares them, vendored (its README says how it was made). check() returns one line per
problem, naming the object and the field: a field the type does not have (with the nearest
names it does have), a value of the wrong type (a string where a number goes, a scalar where
an object or a list goes), a value outside an enum, a required field missing. The type
declarations say "number" for integers and floats alike: 1.5 where an integer goes is not
caught here (the API server refuses it). Stdlib only.

    kube_schema.py FILE.yaml ...    checks every object in the files; exit 1 on a problem"""
import difflib
import json
import os
import sys

SCHEMAS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "third_party",
                       "kubernetes-schemas", "k8s-api.json")


def load(path=SCHEMAS):
    with open(path) as f:
        return json.load(f)


def _tname(v):
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(v), "a number")


class _Checker:
    def __init__(self, schemas, where):
        self.types = schemas["types"]
        self.where = where
        self.problems = []

    def bad(self, path, text):
        self.problems.append(f"{self.where}: {path or '(top)'}: {text}")

    def value(self, v, t, path):
        if v is None:
            return  # null: the field left out
        if isinstance(t, str):
            if t == "any":
                return
            if t == "string":
                ok = isinstance(v, str)
            elif t == "number":
                ok = isinstance(v, (int, float)) and not isinstance(v, bool)
            elif t == "boolean":
                ok = isinstance(v, bool)
            else:
                return self.named(v, t, path)
            if not ok:
                self.bad(path, f"{_tname(v)} ({v!r}) where a {t} goes")
        elif "enum" in t:
            if v not in t["enum"]:
                self.bad(path, f"{v!r} is not one of {', '.join(map(repr, t['enum']))}")
        elif "array" in t:
            if not isinstance(v, list):
                return self.bad(path, f"{_tname(v)} where a list goes")
            for i, item in enumerate(v):
                self.value(item, t["array"], f"{path}[{i}]")
        elif "map" in t:
            if not isinstance(v, dict):
                return self.bad(path, f"{_tname(v)} where a map goes")
            for k, item in v.items():
                self.value(item, t["map"], f"{path}.{k}")
        elif "oneOf" in t:
            for alt in t["oneOf"]:
                sub = _Checker({"types": self.types}, self.where)
                sub.value(v, alt, path)
                if not sub.problems:
                    return
            self.bad(path, f"{_tname(v)} ({v!r}) where "
                     f"{' or '.join(a if isinstance(a, str) else 'another type' for a in t['oneOf'])} goes")
        elif "object" in t:
            self.fields(v, t["object"], path, "this object")

    def named(self, v, name, path):
        t = self.types[name]
        if "alias" in t:
            return self.value(v, t["alias"], path)
        self.fields(v, t, path, name)

    def fields(self, v, t, path, tname):
        if not isinstance(v, dict):
            return self.bad(path, f"{_tname(v)} where an object ({tname}) goes")
        short = tname.split("V1")[-1] if "V1" in tname else tname
        for k, item in v.items():
            sub = f"{path}.{k}" if path else k
            if k not in t["fields"]:
                near = difflib.get_close_matches(k, t["fields"], 3)
                self.bad(sub, f"unknown field {k!r} ({short} has no such field"
                         + (f"; did you mean {', '.join(near)}?)" if near else ")"))
            else:
                self.value(item, t["fields"][k], sub)
        for r in t["required"]:
            if r not in v:
                self.bad(f"{path}.{r}" if path else r, f"required field missing ({short})")


def check(obj, schemas, source=""):
    """The problems of one object (a dict from YAML), each naming it and the field."""
    what = f"{obj.get('kind', '?')} {(obj.get('metadata') or {}).get('name', '?')}"
    where = f"{source}: {what}" if source else what
    key = f"{obj.get('apiVersion')}/{obj.get('kind')}"
    if key not in schemas["kinds"]:
        return [f"{where}: no schema for apiVersion {obj.get('apiVersion')!r} kind "
                f"{obj.get('kind')!r} (known: {', '.join(sorted(schemas['kinds']))})"]
    c = _Checker(schemas, where)
    c.named(obj, schemas["kinds"][key], "")
    return c.problems


def main():
    import yaml
    schemas = load()
    problems, n = [], 0
    for path in sys.argv[1:]:
        with open(path) as f:
            for obj in yaml.safe_load_all(f):
                if obj:
                    n += 1
                    problems += check(obj, schemas, os.path.basename(path))
    for p in problems:
        print(p)
    print(f"{n} objects, {len(problems)} problems (Kubernetes {schemas['kubernetes']})")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
