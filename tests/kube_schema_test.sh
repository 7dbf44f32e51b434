#!/usr/bin/env bash
# Issue 42, point 3: deploy/kubernetes checked against the Kubernetes API's schemas offline
# (tests/kube_schema_test.py, third_party/kubernetes-schemas), and broken manifests
# (tests/testdata/k8s-broken) that must fail the check with the object and field named.
# Needs python3-yaml; `kubectl kustomize` is checked too where a kubectl is installed.
source "$(dirname "$0")/lib.sh"
/usr/bin/python3 -c 'import yaml' 2>/dev/null ||
  fail "python3 has no yaml module: apt-get install python3-yaml (./pstrain's package list has it)"
exec /usr/bin/python3 -B "$(dirname "$0")/kube_schema_test.py" "$RUNFILES/deploy/kubernetes" \
  "$RUNFILES/tests/testdata/k8s-broken"
