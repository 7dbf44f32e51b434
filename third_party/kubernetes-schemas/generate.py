#!/usr/bin/python3
"""Makes k8s-api.json, the schemas tests/kube_schema.py checks manifests against, from the
type declarations (.d.ts) of the npm package kubernetes-models (MIT; generated from
Kubernetes' OpenAPI spec) and, for the Prometheus operator's monitors,
@kubernetes-models/prometheus-operator. Run at development time only (README.md says how);
the tests read the JSON file this writes and need neither node nor npm.

    generate.py NODE_MODULES OUT.json KUBERNETES_VERSION

Each type: its fields, which are required, and each field's type: "string", "number",
"boolean", "any", {"enum": [...]}, {"array": T}, {"map": T}, {"oneOf": [T, ...]} or the name
of another type. Only the types the kinds in KINDS reach are written."""
import json
import os
import re
import sys

KINDS = {  # apiVersion/kind -> the package's name for its type
    "v1/ConfigMap": "IoK8sApiCoreV1ConfigMap",
    "v1/Secret": "IoK8sApiCoreV1Secret",
    "v1/Service": "IoK8sApiCoreV1Service",
    "v1/Pod": "IoK8sApiCoreV1Pod",
    "apps/v1/StatefulSet": "IoK8sApiAppsV1StatefulSet",
    "apps/v1/Deployment": "IoK8sApiAppsV1Deployment",
    "batch/v1/Job": "IoK8sApiBatchV1Job",
    "monitoring.coreos.com/v1/ServiceMonitor":
        "ComGithubPrometheusOperatorPrometheusOperatorPkgApisMonitoringV1ServiceMonitor",
    "monitoring.coreos.com/v1/PodMonitor":
        "ComGithubPrometheusOperatorPrometheusOperatorPkgApisMonitoringV1PodMonitor",
}


def strip_comments(text):
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def split_top(text, sep):
    """text split at sep where no bracket is open."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "{<([":
            depth += 1
        elif ch in "}>)]":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def parse_type(t, canon):
    t = t.strip()
    if t.startswith("(") and t.endswith(")"):
        return parse_type(t[1:-1], canon)
    alts = split_top(t, "|")
    if len(alts) > 1:
        if all(re.fullmatch(r'"[^"]*"', a) for a in alts):
            return {"enum": [a[1:-1] for a in alts]}
        return {"oneOf": [parse_type(a, canon) for a in alts]}
    if re.fullmatch(r'"[^"]*"', t):
        return {"enum": [t[1:-1]]}
    m = re.fullmatch(r"Array<(.*)>", t, flags=re.S)
    if m:
        return {"array": parse_type(m.group(1), canon)}
    m = re.fullmatch(r"\{\s*\[key: string\]:\s*(.*?);?\s*\}", t, flags=re.S)
    if m:
        return {"map": parse_type(m.group(1), canon)}
    if t.startswith("{"):
        return {"object": parse_fields(t[1:-1], canon)}
    if t in ("string", "number", "boolean"):
        return t
    if t in ("any", "unknown", "object", "{}"):
        return "any"
    if t.endswith("[]"):
        return {"array": parse_type(t[:-2], canon)}
    return canon.get(t, t[1:] if t.startswith("I") else t)


def parse_fields(body, canon):
    fields, required = {}, []
    for item in split_top(body, ";"):
        m = re.fullmatch(r'"?([^"?:]+)"?(\?)?:\s*(.*)', item, flags=re.S)
        if not m:
            continue
        name, opt, t = m.groups()
        fields[name] = parse_type(t, canon)
        if not opt:
            required.append(name)
    return {"fields": fields, "required": required}


def read_package(root, types):
    for d, _, files in os.walk(root):
        for f in files:
            if not f.endswith(".d.ts") or f == "index.d.ts":
                continue
            text = strip_comments(open(os.path.join(d, f)).read())
            canon = {}
            for local, full in re.findall(r"\b(\w+) as (I\w+)", text):
                canon[local] = full[1:]
            for name, body in re.findall(r"export type (I\w+) = ([^;]*);", text):
                if name in canon:
                    types[canon[name]] = {"alias": parse_type(body, canon)}
            for m in re.finditer(r"export interface (I\w+)[^{]*\{", text):
                depth, i = 1, m.end()
                while depth:
                    depth += {"{": 1, "}": -1}.get(text[i], 0)
                    i += 1
                name = m.group(1)
                if name in canon:
                    types[canon[name]] = parse_fields(text[m.end():i - 1], canon)


def refs(t):
    if isinstance(t, str):
        return [t] if t not in ("string", "number", "boolean", "any") else []
    if "enum" in t:
        return []
    if "oneOf" in t:
        return [r for a in t["oneOf"] for r in refs(a)]
    if "object" in t:
        return [r for f in t["object"]["fields"].values() for r in refs(f)]
    return refs(t.get("array") or t.get("map") or t.get("alias"))


def main():
    nm, out, version = sys.argv[1:4]
    types = {}
    for pkg in ("kubernetes-models", "@kubernetes-models/apimachinery",
                "@kubernetes-models/prometheus-operator"):
        read_package(os.path.join(nm, pkg), types)
    keep, todo = {}, list(KINDS.values())
    while todo:
        n = todo.pop()
        if n in keep:
            continue
        if n not in types:
            sys.exit(f"generate.py: no type {n} in the packages")
        keep[n] = types[n]
        t = types[n]
        todo += refs(t["alias"]) if "alias" in t else \
            [r for f in t["fields"].values() for r in refs(f)]
    pkgs = {}
    for pkg in ("kubernetes-models", "@kubernetes-models/apimachinery",
                "@kubernetes-models/prometheus-operator"):
        pkgs[pkg] = json.load(open(os.path.join(nm, pkg, "package.json")))["version"]
    with open(out, "w") as f:
        json.dump({"kubernetes": version, "from": pkgs, "kinds": KINDS,
                   "types": dict(sorted(keep.items()))}, f, indent=0, sort_keys=True)
        f.write("\n")
    print(f"{out}: {len(keep)} types for {len(KINDS)} kinds")


if __name__ == "__main__":
    main()
