"""tests/kube_schema_test: deploy/kubernetes checked against the Kubernetes API's schemas,
offline (kube_schema.py, third_party/kubernetes-schemas).

  1. Every object of every manifest in deploy/kubernetes (the kustomization's resources, the
     Secret template, the monitors) has no problem.
  2. Where a kubectl is installed: `kubectl kustomize` of it, and with the gpu and elastic
     components, the same (what `kubectl apply -k` would send).
  3. Each file in testdata/k8s-broken fails with exactly the problems its `# expect:` lines
     name (the object and the field): a misspelled field, a string where an integer goes, a
     list where an object goes, a value outside an enum, a required field missing, an
     unknown kind."""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

import yaml

import kube_schema


def main():
    mdir, broken = sys.argv[1], sys.argv[2]
    schemas = kube_schema.load()
    passed, problems = 0, []

    files = sorted(glob.glob(os.path.join(mdir, "*.yaml")))
    n = 0
    for f in files:
        if os.path.basename(f) == "kustomization.yaml":
            continue
        for obj in yaml.safe_load_all(open(f)):
            if obj:
                n += 1
                problems += kube_schema.check(obj, schemas, os.path.basename(f))
    if problems:
        fail(passed, "the manifests:\n  " + "\n  ".join(problems))
    passed += 1
    print(f"PASS: {n} objects in {len(files) - 1} files of deploy/kubernetes match Kubernetes "
          f"{schemas['kubernetes']}'s schemas")

    kubectl = shutil.which("kubectl")
    if kubectl:
        with tempfile.TemporaryDirectory() as tmp:
            # A copy: kustomize does not follow a kustomization.yaml that is a link (runfiles).
            shutil.copytree(mdir, tmp, dirs_exist_ok=True)
            counts = []
            base = open(os.path.join(tmp, "kustomization.yaml")).read()
            for extra in ("", "components:\n  - gpu\n", "components:\n  - elastic\n",
                          "components:\n  - gpu\n  - elastic\n"):
                with open(os.path.join(tmp, "kustomization.yaml"), "w") as f:
                    f.write(base + extra)
                out = subprocess.run([kubectl, "kustomize", tmp], capture_output=True, text=True)
                if out.returncode != 0:
                    fail(passed, f"kubectl kustomize: {out.stderr.strip()}")
                objs = [o for o in yaml.safe_load_all(out.stdout) if o]
                for o in objs:
                    problems += kube_schema.check(o, schemas, "kustomize " + extra.replace("\n", " "))
                counts.append(len(objs))
        if problems:
            fail(passed, "kubectl kustomize's output:\n  " + "\n  ".join(problems))
        passed += 1
        print(f"PASS: kubectl kustomize renders {counts[0]} objects, and {counts[1]}, {counts[2]} "
              f"and {counts[3]} with the gpu, elastic and both components, all matching the schemas")
    else:
        print("SKIP: no kubectl: kustomize's output not checked (the files are)")

    for f in sorted(glob.glob(os.path.join(broken, "*.yaml"))):
        want = [l.split("expect:", 1)[1].strip() for l in open(f) if l.startswith("# expect:")]
        got = []
        for obj in yaml.safe_load_all(open(f)):
            if obj:
                got += kube_schema.check(obj, schemas)
        missing = [w for w in want if not any(w in g for g in got)]
        if not want or missing or len(got) != len(want):
            fail(passed, f"{os.path.basename(f)}: want {want}, got {got}")
        passed += 1
        print(f"PASS: {os.path.basename(f)} fails the check as it should: " + "; ".join(got))
    print(f"{passed} passed, 0 failed")


def fail(passed, text):
    print(f"FAIL: {text}")
    print(f"{passed} passed, 1 failed")
    sys.exit(1)


if __name__ == "__main__":
    main()
