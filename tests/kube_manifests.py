"""deploy/kubernetes/ read as Kubernetes would read it, and checked (tests/kubernetes_test).

load() reads the objects kustomization.yaml lists, the Secret template (secret.yaml), the
monitoring objects and the GPU component; check() checks the fields that matter (how the
objects refer to each other, the config files' numbers against the objects', the probes,
the pod failure policy against pstrain's exit statuses, the securityContext against the
systemd units' hardening, the image recipe against the programs' libraries) and returns one
line per problem. failure_action() is the Job controller's reading of a podFailurePolicy,
which the simulated cluster (kube_sim.py) uses too. Needs Debian's python3-yaml."""
import configparser
import copy
import os
import re
import shutil
import subprocess
import tempfile

import yaml

EXPECTED = {  # kind -> (apiVersion, name)
    "ConfigMap": ("v1", "pstrain-config"),
    "Service": ("v1", "pstrain-ps"),
    "StatefulSet": ("apps/v1", "pstrain-ps"),
    "Job": ("batch/v1", "pstrain-worker"),
}


class Manifests:
    """The objects of one deploy/kubernetes directory."""

    def __init__(self, mdir):
        self.dir = mdir
        self.kust = self._one("kustomization.yaml")
        self.objs = []
        for f in self.kust.get("resources", []):
            self.objs += [d for d in self._all(f) if d]
        self.secret = self._one("secret.yaml")
        self.monitoring = [d for d in self._all("monitoring.yaml") if d]
        self.gpu = self._one(os.path.join("gpu", "kustomization.yaml"))
        self.elastic = self._one(os.path.join("elastic", "kustomization.yaml"))

    def _all(self, f):
        with open(os.path.join(self.dir, f)) as fh:
            return list(yaml.safe_load_all(fh))

    def _one(self, f):
        docs = [d for d in self._all(f) if d]
        if len(docs) != 1:
            raise ValueError(f"{f}: {len(docs)} documents, want 1")
        return docs[0]

    def get(self, kind, name=None):
        for o in self.objs:
            if o.get("kind") == kind and (name is None or o["metadata"]["name"] == name):
                return o
        return None

    @property
    def configmap(self):
        return self.get("ConfigMap")

    @property
    def service(self):
        return self.get("Service")

    @property
    def statefulset(self):
        return self.get("StatefulSet")

    @property
    def job(self):
        return self.get("Job")

    def conf(self, key):
        """A config file of the ConfigMap as {key: value} (its one section)."""
        return parse_conf(self.configmap["data"][key])


def apply_component(objs, component):
    """The objects with a kustomize Component's JSON 6902 patches applied (add, replace;
    paths with ~1 and a trailing /- as kustomize takes them), as `kubectl kustomize` would,
    for when no kubectl is installed. Returns new objects."""
    objs = copy.deepcopy(objs)
    for p in component.get("patches", []):
        t = p["target"]
        for o in objs:
            if o["kind"] != t["kind"] or o["metadata"]["name"] != t["name"]:
                continue
            for op in yaml.safe_load(p["patch"]):
                keys = [k.replace("~1", "/").replace("~0", "~") for k in op["path"].split("/")[1:]]
                parent = o
                for k in keys[:-1]:
                    parent = parent[int(k)] if isinstance(parent, list) else parent[k]
                last = keys[-1]
                if op["op"] not in ("add", "replace"):
                    raise ValueError(f"patch op {op['op']} is not supported here")
                if isinstance(parent, list):
                    if last == "-":
                        parent.append(op["value"])
                    elif op["op"] == "add":
                        parent.insert(int(last), op["value"])
                    else:
                        parent[int(last)] = op["value"]
                else:
                    parent[last] = op["value"]
    return objs


def parse_conf(text):
    cp = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=None)
    cp.read_string(text)
    sections = cp.sections()
    if len(sections) != 1:
        raise ValueError(f"want one section, got {sections}")
    return dict(cp[sections[0]])


def failure_action(policy, container, exit_code, conditions=()):
    """What a Job's podFailurePolicy does with a pod whose container ended with exit_code
    (128+N for signal N): the first rule that matches decides (FailJob, FailIndex, Ignore,
    Count); no rule matching counts the failure (Count)."""
    for rule in (policy or {}).get("rules", []):
        codes = rule.get("onExitCodes")
        if codes is not None:
            if codes.get("containerName") not in (None, container):
                continue
            inside = exit_code in codes["values"]
            if (codes["operator"] == "In") == inside and exit_code != 0:
                return rule["action"]
        for cond in rule.get("onPodConditions", []):
            if cond["type"] in conditions and cond.get("status", "True") == "True":
                return rule["action"]
    return "Count"


def _labels_match(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def _port(container, name):
    for p in container.get("ports", []):
        if p.get("name") == name:
            return p["containerPort"]
    return None


def _hostport(text):
    host, _, port = text.rpartition(":")
    return host, int(port)


def check_pod(problems, what, pod, containerfile_user, image_programs):
    """The pod template's hardening (the systemd units' sandbox) and its image."""
    psc = pod.get("securityContext", {})
    if psc.get("runAsNonRoot") is not True or not psc.get("runAsUser"):
        problems.append(f"{what}: the pod must run as a non-root user (runAsNonRoot, runAsUser)")
    if str(psc.get("runAsUser")) != containerfile_user:
        problems.append(f"{what}: runAsUser {psc.get('runAsUser')} is not the image's USER "
                        f"{containerfile_user}")
    if pod.get("automountServiceAccountToken") is not False:
        problems.append(f"{what}: automountServiceAccountToken must be false (no API access)")
    if pod.get("enableServiceLinks") is not False:
        problems.append(f"{what}: enableServiceLinks must be false (PSTRAIN_PS_* variables)")
    for c in pod["containers"]:
        sc = c.get("securityContext", {})
        seccomp = sc.get("seccompProfile", psc.get("seccompProfile", {})).get("type")
        if seccomp != "RuntimeDefault":
            problems.append(f"{what}/{c['name']}: seccompProfile {seccomp}, want RuntimeDefault")
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{what}/{c['name']}: allowPrivilegeEscalation must be false")
        if sc.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{what}/{c['name']}: readOnlyRootFilesystem must be true")
        caps = sc.get("capabilities", {})
        if "ALL" not in caps.get("drop", []) or caps.get("add"):
            problems.append(f"{what}/{c['name']}: capabilities must drop ALL and add none")
        if c.get("terminationMessagePolicy") != "FallbackToLogsOnError":
            problems.append(f"{what}/{c['name']}: terminationMessagePolicy must be "
                            "FallbackToLogsOnError (the reason of a failure is its log line)")
        if c["command"][0] not in image_programs:
            problems.append(f"{what}/{c['name']}: {c['command'][0]} is not in the image "
                            f"({sorted(image_programs)})")


def check_volumes(problems, what, m, pod, conf_key):
    """The config file at the path the daemon's --config names, the Secret where
    CREDENTIALS_DIRECTORY says, readable by the pod's group only."""
    c = pod["containers"][0]
    mounts = {v["name"]: v for v in c.get("volumeMounts", [])}
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    args = c.get("args", [])
    conf_path = args[args.index("--config") + 1] if "--config" in args else None
    found_conf = found_secret = False
    for name, v in vols.items():
        mnt = mounts.get(name)
        if mnt is None:
            problems.append(f"{what}: volume {name} is mounted nowhere")
            continue
        if "configMap" in v:
            if v["configMap"]["name"] != m.configmap["metadata"]["name"]:
                problems.append(f"{what}: volume {name} names ConfigMap {v['configMap']['name']}")
            for item in v["configMap"].get("items", []):
                if item["key"] not in m.configmap["data"]:
                    problems.append(f"{what}: ConfigMap has no {item['key']}")
                if os.path.join(mnt["mountPath"], item["path"]) == conf_path and \
                        item["key"] == conf_key:
                    found_conf = True
            if not mnt.get("readOnly"):
                problems.append(f"{what}: the config volume must be mounted readOnly")
        if "secret" in v:
            if v["secret"]["secretName"] != m.secret["metadata"]["name"]:
                problems.append(f"{what}: volume {name} names Secret {v['secret']['secretName']}")
            mode = v["secret"].get("defaultMode", 0o644)
            if mode & 0o007:
                problems.append(f"{what}: the Secret's defaultMode {mode:o} lets others read it")
            env = {e["name"]: e.get("value") for e in c.get("env", [])}
            if env.get("CREDENTIALS_DIRECTORY") != mnt["mountPath"]:
                problems.append(f"{what}: CREDENTIALS_DIRECTORY is not the Secret's mountPath "
                                f"{mnt['mountPath']}")
            found_secret = True
    if not found_conf:
        problems.append(f"{what}: --config {conf_path} is not the ConfigMap's {conf_key}")
    if not found_secret:
        problems.append(f"{what}: no Secret volume (the cluster secret)")


def check_probes(problems, c, metrics_port):
    want = {"startupProbe": "/healthz", "livenessProbe": "/healthz", "readinessProbe": "/readyz"}
    for probe, path in want.items():
        p = c.get(probe)
        if probe == "readinessProbe" and c["name"] != "ps":
            continue
        get = (p or {}).get("httpGet", {})
        port = get.get("port")
        port = _port(c, port) if isinstance(port, str) else port
        if get.get("path") != path or port != metrics_port:
            problems.append(f"{c['name']}: {probe} must GET {path} on the metrics port "
                            f"{metrics_port}, has {get}")


def check(m, units_ps_conf, containerfile):
    """Every problem found, one line each (empty: the manifests hang together)."""
    problems = []
    for kind, (api, name) in EXPECTED.items():
        o = m.get(kind)
        if o is None:
            problems.append(f"kustomization.yaml's resources have no {kind}")
        elif (o["apiVersion"], o["metadata"]["name"]) != (api, name):
            problems.append(f"{kind}: {o['apiVersion']} {o['metadata']['name']}, want {api} {name}")
    if "secret.yaml" in m.kust.get("resources", []):
        problems.append("secret.yaml must not be applied by -k (its placeholder would replace "
                        "the real secret)")
    if problems:
        return problems
    svc, sts, job = m.service, m.statefulset, m.job
    ps_conf, wk_conf = m.conf("ps.conf"), m.conf("worker.conf")
    image_user, image_programs = read_containerfile(containerfile)

    # The ps: the headless Service, the StatefulSet and k8s-ps in both config files.
    if svc["spec"].get("clusterIP") != "None":
        problems.append("Service pstrain-ps must be headless (clusterIP: None)")
    tmpl = sts["spec"]["template"]
    labels = tmpl["metadata"]["labels"]
    if not _labels_match(svc["spec"]["selector"], labels):
        problems.append("the Service's selector does not select the StatefulSet's pods")
    if not _labels_match(sts["spec"]["selector"]["matchLabels"], labels):
        problems.append("the StatefulSet's selector does not select its own pods")
    if sts["spec"]["serviceName"] != svc["metadata"]["name"]:
        problems.append("the StatefulSet's serviceName is not the headless Service")
    ps_c = tmpl["spec"]["containers"][0]
    for conf_name, conf in (("ps.conf", ps_conf), ("worker.conf", wk_conf)):
        spec = conf.get("k8s-ps", "")
        host, port = _hostport(spec)
        set_name, _, service = host.partition(".")
        if set_name != sts["metadata"]["name"] or (service or set_name) != svc["metadata"]["name"]:
            problems.append(f"{conf_name}: k8s-ps {spec} is not StatefulSet "
                            f"{sts['metadata']['name']} behind Service {svc['metadata']['name']}")
        if int(conf.get("k8s-ps-replicas", "1")) != sts["spec"]["replicas"]:
            problems.append(f"{conf_name}: k8s-ps-replicas {conf.get('k8s-ps-replicas', 1)} is not "
                            f"the StatefulSet's replicas {sts['spec']['replicas']}")
        svc_port = {p["name"]: p["port"] for p in svc["spec"]["ports"]}.get("ps")
        if port != _port(ps_c, "ps") or port != svc_port:
            problems.append(f"{conf_name}: k8s-ps port {port} is not the ps container's and "
                            f"Service's port 'ps' ({_port(ps_c, 'ps')}, {svc_port})")
    for p in svc["spec"]["ports"]:
        if _port(ps_c, p["targetPort"]) is None:
            problems.append(f"Service port {p['name']}: the ps container has no port "
                            f"{p['targetPort']}")
    host, metrics_port = _hostport(ps_conf["metrics-listen"])
    if host != "0.0.0.0" or metrics_port != _port(ps_c, "metrics"):
        problems.append(f"ps.conf: metrics-listen {ps_conf['metrics-listen']} is not 0.0.0.0 and "
                        "the container's port 'metrics' (the probes and Prometheus reach it)")
    check_probes(problems, ps_c, metrics_port)
    if ps_conf.get("on-worker-loss") != "wait":
        problems.append("ps.conf: on-worker-loss must be wait (the Job replaces a lost worker; "
                        "going on without it gives its slot up when the others finish)")
    if ps_conf.get("on-finish") != "wait":
        problems.append("ps.conf: on-finish must be wait (a StatefulSet restarts a pod that exits)")
    # The checkpoints at the systemd units' path, on the volume claim.
    units_dir = parse_conf(open(units_ps_conf).read())["checkpoint-dir"]
    if ps_conf.get("checkpoint-dir") != units_dir:
        problems.append(f"ps.conf: checkpoint-dir {ps_conf.get('checkpoint-dir')} is not the "
                        f"units' {units_dir}")
    claims = {t["metadata"]["name"] for t in sts["spec"].get("volumeClaimTemplates", [])}
    on_claim = [v for v in ps_c["volumeMounts"] if v["name"] in claims and
                units_dir.startswith(v["mountPath"].rstrip("/") + "/")]
    if not on_claim:
        problems.append(f"{units_dir} is on no volumeClaimTemplate of the StatefulSet")
    for key in ("summary-json", "metrics", "tensorboard"):
        if ps_conf.get(key) and on_claim and \
                not ps_conf[key].startswith(on_claim[0]["mountPath"].rstrip("/") + "/"):
            problems.append(f"ps.conf: {key} {ps_conf[key]} is not on the volume (a read-only "
                            "root file system)")

    # The workers: an Indexed Job of `workers` pods, pstrain's exit statuses in its policy.
    spec = job["spec"]
    if spec.get("completionMode") != "Indexed":
        problems.append("the Job must be Indexed (JOB_COMPLETION_INDEX is the worker index)")
    if not (spec.get("completions") == spec.get("parallelism") == int(ps_conf["workers"])):
        problems.append(f"the Job's completions {spec.get('completions')} and parallelism "
                        f"{spec.get('parallelism')} must be ps.conf's workers {ps_conf['workers']}")
    wpod = spec["template"]["spec"]
    if wpod.get("restartPolicy") != "Never":
        problems.append("the Job's pods need restartPolicy Never (a pod failure policy does)")
    wc = wpod["containers"][0]
    policy = spec.get("podFailurePolicy")
    want = {0: "Count", 1: "Count", 2: "FailJob", 3: "Ignore", 137: "Count", 139: "Count"}
    for code, action in want.items():
        got = failure_action(policy, wc["name"], code) if code else "Count"
        if got != action:
            problems.append(f"podFailurePolicy: exit {code} -> {got}, want {action}")
    if failure_action(policy, wc["name"], 1, ("DisruptionTarget",)) != "Ignore":
        problems.append("podFailurePolicy: a disrupted pod (DisruptionTarget) should not count")
    wk_host, wk_metrics = _hostport(wk_conf.get("metrics-listen", ":0"))
    if wk_metrics != _port(wc, "metrics"):
        problems.append("worker.conf: metrics-listen is not the worker container's port 'metrics'")
    check_probes(problems, wc, wk_metrics)
    if float(wk_conf.get("connect-timeout", "30")) < 120:
        problems.append("worker.conf: connect-timeout under 2 minutes (a ps pod may start later)")

    # Both pods.
    for what, pod, key in (("ps", tmpl["spec"], "ps.conf"), ("worker", wpod, "worker.conf")):
        check_pod(problems, what, pod, image_user, image_programs)
        check_volumes(problems, what, m, pod, key)

    # The elastic component: workers MIN:MAX for the ps (by its environment), the Job's
    # completions = parallelism between them, on-worker-loss continue (the ps refuses wait
    # with the data handed out).
    e_sts, e_job = apply_component([sts, job], m.elastic)
    env = {e["name"]: e.get("value") for e in e_sts["spec"]["template"]["spec"]["containers"][0].get("env", [])}
    mm = re.fullmatch(r"(\d+):(\d+)", env.get("PSTRAIN_PS_WORKERS") or "")
    e_spec = e_job["spec"]
    if not mm or env.get("PSTRAIN_PS_ON_WORKER_LOSS") != "continue" or \
            e_spec.get("completions") != e_spec.get("parallelism") or \
            not int(mm.group(1)) <= e_spec["completions"] <= int(mm.group(2)):
        problems.append(f"elastic/: workers {env.get('PSTRAIN_PS_WORKERS')}, on-worker-loss "
                        f"{env.get('PSTRAIN_PS_ON_WORKER_LOSS')}, the Job's completions "
                        f"{e_spec.get('completions')} and parallelism {e_spec.get('parallelism')}")

    # The GPU component: one nvidia.com/gpu per worker pod.
    ops = yaml.safe_load(m.gpu["patches"][0]["patch"])
    gpu = [o for o in ops if o["path"].endswith("/resources/limits/nvidia.com~1gpu")]
    if m.gpu["patches"][0]["target"]["name"] != job["metadata"]["name"] or \
            not gpu or gpu[0]["value"] != 1:
        problems.append("gpu/: no nvidia.com/gpu: 1 for the worker Job's pods")

    # Prometheus: the monitors select the pods' metrics ports.
    for mon in m.monitoring:
        if mon["kind"] == "ServiceMonitor":
            ok = _labels_match(mon["spec"]["selector"]["matchLabels"], svc["metadata"]["labels"])
            ports = [e["port"] for e in mon["spec"]["endpoints"]]
            ok = ok and all(p in [x["name"] for x in svc["spec"]["ports"]] for p in ports)
        else:
            ok = _labels_match(mon["spec"]["selector"]["matchLabels"],
                               spec["template"]["metadata"]["labels"])
            ports = [e["port"] for e in mon["spec"]["podMetricsEndpoints"]]
            ok = ok and all(_port(wc, p) for p in ports)
        if not ok:
            problems.append(f"{mon['kind']} {mon['metadata']['name']} selects no metrics port")
    return problems


def read_containerfile(path):
    """The image's USER and the programs its COPY puts in place."""
    user, programs = None, set()
    for line in open(path).read().replace("\\\n", " ").splitlines():
        words = line.split()
        if not words:
            continue
        if words[0] == "USER":
            user = words[1].split(":")[0]
        if words[0] == "COPY" and len(words) > 2:
            dest = words[-1]
            for src in words[1:-1]:
                programs.add(os.path.join(dest, os.path.basename(src)) if dest.endswith("/")
                             else dest)
    return user, programs


def check_image_libraries(packages_file, programs):
    """Each shared library the programs link must come with the image: from a package the
    image gets (packages.txt in build.sh's context, which build.sh finds the same way), or
    one those depend on, or from the base (Priority: required). Uses ldd and dpkg of this
    Debian 12 machine, where the programs were built. tests/image_test runs ldd in the
    built image itself."""
    status = subprocess.run(["dpkg-query", "-W", "-f=${Package}\t${Priority}\t${Depends},"
                             "${Pre-Depends}\n"], capture_output=True, text=True).stdout
    prio, deps = {}, {}
    for line in status.splitlines():
        name, p, d = line.split("\t")
        prio[name] = p
        deps[name] = [alt.split("|")[0].strip().split(" ")[0].split(":")[0]
                      for alt in d.split(",") if alt.strip()]
    have, todo = set(), open(packages_file).read().split()
    while todo:  # the listed packages and everything they depend on, as installed here
        p = todo.pop()
        if p not in have:
            have.add(p)
            todo += deps.get(p, [])
    libs = {}
    for prog in programs:
        out = subprocess.run(["ldd", prog], capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split("=>")
            if len(parts) == 2 and parts[1].strip().startswith("/"):
                libs.setdefault(os.path.realpath(parts[1].split()[0]), os.path.basename(prog))
    # dpkg knows each file by the path its package ships, /lib or /usr/lib (merged /usr).
    paths = list(libs) + [lib.replace("/usr/lib/", "/lib/", 1) for lib in libs]
    owners = {}
    out = subprocess.run(["dpkg-query", "-S"] + paths, capture_output=True, text=True).stdout
    for line in out.splitlines():
        pkgs, _, path = line.partition(": ")
        owners[path.replace("/lib/", "/usr/lib/", 1) if path.startswith("/lib/") else path] = \
            pkgs.split(",")[0].split(":")[0].strip()
    problems = []
    for lib, prog in sorted(libs.items()):
        owner = owners.get(lib)
        if owner is None:
            problems.append(f"{prog}: {lib} belongs to no Debian package")
        elif owner not in have and prio.get(owner) != "required":
            problems.append(f"{prog} links {lib} from {owner}, which the image does not get")
    return problems


def kustomize_check(m):
    """With a kubectl at hand (none is required): `kubectl kustomize` renders the same
    objects, offline, and with the gpu component a worker pod with one GPU. Returns
    (problems, note)."""
    kubectl = shutil.which("kubectl")
    if not kubectl:
        return [], "no kubectl: kustomize rendering not checked"
    problems = []
    # A copy: kustomize does not follow a kustomization.yaml that is a link (Bazel's runfiles).
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(m.dir, tmp, dirs_exist_ok=True)
        out = subprocess.run([kubectl, "kustomize", tmp], capture_output=True, text=True)
        if out.returncode != 0:
            return [f"kubectl kustomize: {out.stderr.strip()}"], ""
        got = sorted((o["kind"], o["metadata"]["name"])
                     for o in yaml.safe_load_all(out.stdout) if o)
        want = sorted((o["kind"], o["metadata"]["name"]) for o in m.objs)
        if got != want:
            problems.append(f"kubectl kustomize renders {got}, the files hold {want}")
        with open(os.path.join(tmp, "kustomization.yaml"), "a") as f:
            f.write("components:\n  - gpu\n")
        out = subprocess.run([kubectl, "kustomize", tmp], capture_output=True, text=True)
        jobs = [o for o in yaml.safe_load_all(out.stdout) if o and o["kind"] == "Job"]
        limits = jobs[0]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] \
            if jobs else {}
        if out.returncode != 0 or limits.get("nvidia.com/gpu") != 1:
            problems.append(f"kubectl kustomize with components: [gpu]: no nvidia.com/gpu: 1 "
                            f"({out.stderr.strip()})")
    return problems, "kubectl kustomize renders them (and the gpu component)"
