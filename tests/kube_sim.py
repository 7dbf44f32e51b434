"""A Kubernetes cluster played on one machine with real processes, for tests/kubernetes_test.

What it does as Kubernetes would, from the manifests' own objects (kube_manifests.py):
  - pods: each in a network namespace of its own (a veth on a bridge in a "node" namespace,
    a new address for every new pod), a UTS namespace whose host name is the pod's, and a
    mount namespace whose root is the "image": a read-only tmpfs (readOnlyRootFilesystem)
    with this machine's /usr (Debian 12, as the Containerfile's base) and the built programs
    at /usr/local/bin (the Containerfile's COPY). The container's command and args run as
    given, with its env ($(VAR) references, fieldRef, JOB_COMPLETION_INDEX) and nothing
    else, as runAsUser:runAsGroup with the fsGroup as supplementary group, no capabilities
    and no_new_privs (allowPrivilegeEscalation: false), chrooted, its volumes mounted:
    ConfigMaps and Secrets in kubelet's layout (..data links; files root's, of the fsGroup,
    defaultMode | 0440, read-only), emptyDirs, and PersistentVolumeClaims as directories that
    outlive their pods (group fsGroup, setgid);
  - cluster DNS: every pod's /etc/hosts, rewritten in place when records change, holds the
    ready pods of a headless Service (pstrain-ps-0.pstrain-ps and its longer forms) and the
    pod's own name; the image's name service looks at files only, so a name that is not
    there does not exist (as CoreDNS's NXDOMAIN);
  - kubelet: startup, liveness and readiness probes (httpGet, their periods and thresholds),
    restarts with CrashLoopBackOff's delays (restartPolicy Always), the termination message
    (FallbackToLogsOnError: the log's tail), deletion (SIGTERM, SIGKILL after the grace
    period; --force: SIGKILL at once);
  - the StatefulSet controller (pods NAME-0..R-1, re-created with the same name and claim)
    and the Job controller for Indexed Jobs (a pod per index, replacements with the same
    index after the Job's back-off delay, the podFailurePolicy's FailJob/Ignore/Count,
    backoffLimit, Complete once every index succeeded).
What it does not: a scheduler, resources and limits, seccomp (no container runtime here),
image pulls, the API server.

Needs root, iproute2 (ip netns), util-linux (unshare, setpriv) and coreutils' chroot."""
import base64
import concurrent.futures
import ctypes
import http.client
import os
import random
import shlex
import signal
import string
import subprocess
import time

import kube_manifests

CLONE_NEWNET = 0x40000000
NAMESPACE = "default"
DOMAIN = "cluster.local"
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What the image's /etc holds besides what kubelet mounts (hosts, resolv.conf, hostname).
IMAGE_ETC = ["alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group",
             "host.conf", "gai.conf"]
DEVICES = ["null", "zero", "full", "random", "urandom"]
INDEX_ENV = "JOB_COMPLETION_INDEX"  # what the Job controller gives an Indexed Job's pods
JOB_BACKOFF_S = 10      # the Job controller's first delay before a failed pod's replacement
CRASH_BACKOFF_S = 10    # kubelet's first delay before a container is restarted


def run(*args):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


class Network:
    """The node: a namespace with a bridge, which this process joins (its probes reach every
    pod's address), and a namespace per pod on that bridge."""

    def __init__(self, prefix, subnet):
        self.prefix, self.subnet, self.next = prefix, subnet, 10
        self.hub = f"{prefix}-node"
        run("ip", "netns", "add", self.hub)
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(f"/run/netns/{self.hub}", os.O_RDONLY)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns into the node's network namespace")
        os.close(fd)
        run("ip", "link", "set", "lo", "up")
        run("ip", "link", "add", "br0", "type", "bridge")
        run("ip", "addr", "add", f"{subnet}.1/24", "dev", "br0")
        run("ip", "link", "set", "br0", "up")

    def add(self, ns):
        if self.next > 250:
            raise RuntimeError("out of pod addresses")
        ip, veth = f"{self.subnet}.{self.next}", f"v{self.next}"
        self.next += 1
        run("ip", "netns", "add", ns)
        run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        run("ip", "link", "set", veth, "master", "br0", "up")
        run("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
        run("ip", "-n", ns, "link", "set", "eth0", "up")
        run("ip", "-n", ns, "link", "set", "lo", "up")
        return ip

    def remove(self, ns):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)

    def close(self):
        self.remove(self.hub)


class Probe:
    def __init__(self, kind, spec):
        self.kind, self.spec = kind, spec
        self.period = spec.get("periodSeconds", 10)
        self.timeout = spec.get("timeoutSeconds", 1)
        self.failure_threshold = spec.get("failureThreshold", 3)
        self.due = time.monotonic() + spec.get("initialDelaySeconds", 0)
        self.failures = self.successes = 0
        self.future = None


class Pod:
    """One pod with one container (all pstrain's pods have one)."""

    def __init__(self, cluster, name, owner, spec, labels, hostname, subdomain=None,
                 env_extra=None, claims=None, index=None):
        self.c, self.name, self.owner, self.spec = cluster, name, owner, spec
        self.labels, self.hostname, self.subdomain = labels, hostname, subdomain
        self.env_extra, self.claims, self.index = env_extra or {}, claims or {}, index
        cluster.uid += 1
        self.uid = cluster.uid
        self.dir = os.path.join(cluster.work, "pods", f"{name}-{self.uid}")
        os.makedirs(os.path.join(self.dir, "rootfs"))
        self.ns = f"{cluster.net.prefix}-p{self.uid}"
        self.ip = cluster.net.add(self.ns)
        self.container = spec["containers"][0]
        self.phase, self.restarts, self.runs = "Pending", 0, []
        self.proc, self.next_start, self.deleting, self.deadline = None, time.monotonic(), None, 0
        self.started = self.ready = False
        self.log = os.path.join(cluster.work, "logs", f"{name}-{self.uid}.log")
        self.created = time.monotonic()
        self.volumes = self._volumes()
        self.c.event(f"pod {name} created (address {self.ip})")

    # -- kubelet: volumes, the container, probes --

    def _security(self):
        psc = self.spec.get("securityContext", {})
        csc = self.container.get("securityContext", {})
        user = csc.get("runAsUser", psc.get("runAsUser", self.c.image_user))
        group = csc.get("runAsGroup", psc.get("runAsGroup", user))
        fs_group = psc.get("fsGroup")
        groups = [g for g in [fs_group] + psc.get("supplementalGroups", []) if g is not None]
        return int(user), int(group), fs_group, groups, csc

    def _atomic_dir(self, path, files, gid):
        """A ConfigMap's or Secret's files as kubelet's atomic writer lays them out."""
        stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.000000001")
        os.makedirs(os.path.join(path, stamp))
        for rel, (data, mode) in files.items():
            p = os.path.join(path, stamp, rel)
            with open(p, "wb") as f:
                f.write(data)
            os.chown(p, 0, gid if gid is not None else 0)
            os.chmod(p, mode | (0o440 if gid is not None else 0))
            os.symlink(os.path.join("..data", rel), os.path.join(path, rel))
        os.symlink(stamp, os.path.join(path, "..data"))
        for d in (path, os.path.join(path, stamp)):
            os.chown(d, 0, gid if gid is not None else 0)
            os.chmod(d, 0o2755 if gid is not None else 0o755)

    def _volumes(self):
        _, _, fs_group, _, _ = self._security()
        out = {}
        for v in self.spec.get("volumes", []):
            path = os.path.join(self.dir, "volumes", v["name"])
            if "configMap" in v or "secret" in v:
                src = v.get("configMap") or v["secret"]
                obj = self.c.configmaps.get(src.get("name")) if "configMap" in v else \
                    self.c.secrets.get(src.get("secretName"))
                if obj is None:
                    raise RuntimeError(f"pod {self.name}: volume {v['name']}: no such object")
                mode = src.get("defaultMode", 0o644)
                items = src.get("items") or [{"key": k, "path": k} for k in obj]
                self._atomic_dir(path, {i["path"]: (obj[i["key"]], i.get("mode", mode))
                                        for i in items}, fs_group)
            elif "emptyDir" in v:
                os.makedirs(path)
                os.chmod(path, 0o777)
            elif "persistentVolumeClaim" in v:
                path = self.c.claim_dir(v["persistentVolumeClaim"]["claimName"], fs_group)
            else:
                raise RuntimeError(f"pod {self.name}: volume {v['name']}: unsupported kind")
            out[v["name"]] = path
        for tmpl, claim in self.claims.items():
            out[tmpl] = self.c.claim_dir(claim, fs_group)
        return out

    def _env(self):
        env = {"PATH": IMAGE_PATH, "HOSTNAME": self.hostname, "HOME": "/"}
        env.update(self.env_extra)
        for e in self.container.get("env", []):
            if "value" in e:
                env[e["name"]] = expand(e["value"], env)
            else:
                ref = e["valueFrom"]
                if "fieldRef" in ref:
                    env[e["name"]] = self.field(ref["fieldRef"]["fieldPath"])
                elif "configMapKeyRef" in ref:
                    r = ref["configMapKeyRef"]
                    env[e["name"]] = self.c.configmaps[r["name"]][r["key"]].decode()
                elif "secretKeyRef" in ref:
                    r = ref["secretKeyRef"]
                    env[e["name"]] = self.c.secrets[r["name"]][r["key"]].decode()
        return env

    def field(self, path):
        fields = {"metadata.name": self.name, "metadata.namespace": NAMESPACE,
                  "status.podIP": self.ip, "spec.nodeName": self.c.net.hub}
        for k, v in self.labels.items():
            fields[f"metadata.labels['{k}']"] = v
        return fields[path]

    def _script(self):
        """The container's start: its root, mounts and identity, then exec of the command."""
        r = os.path.join(self.dir, "rootfs")
        uid, gid, _, groups, csc = self._security()
        q = shlex.quote
        lines = ["set -eu", f"R={q(r)}", f"hostname {q(self.hostname)}",
                 "mount -t tmpfs -o mode=0755 pod-root \"$R\"",
                 "mkdir -p \"$R/usr\" \"$R/etc\" \"$R/proc\" \"$R/dev\"",
                 "mount --rbind /usr \"$R/usr\"", "mount -o remount,bind,ro \"$R/usr\"",
                 f"mount --bind {q(self.c.image_bin)} \"$R/usr/local/bin\"",
                 "mount -o remount,bind,ro \"$R/usr/local/bin\"",
                 "for l in bin lib lib64 sbin; do ln -s usr/$l \"$R/$l\"; done",
                 "cd /etc && cp -a " + " ".join(q(f) for f in IMAGE_ETC if
                                                os.path.exists("/etc/" + f)) + " \"$R/etc/\"",
                 "echo 'hosts: files' >\"$R/etc/nsswitch.conf\"",
                 f"printf '%s\\n' {q(self.hostname)} >\"$R/etc/hostname\"",
                 f"cp {q(os.path.join(self.dir, 'resolv.conf'))} \"$R/etc/resolv.conf\"",
                 f"touch \"$R/etc/hosts\"; mount --bind {q(os.path.join(self.dir, 'hosts'))} "
                 "\"$R/etc/hosts\"",
                 "mount -t proc proc \"$R/proc\"",
                 "mount -t tmpfs -o mode=0755,nosuid pod-dev \"$R/dev\""]
        for d in DEVICES:
            lines.append(f"touch \"$R/dev/{d}\"; mount --bind /dev/{d} \"$R/dev/{d}\"")
        lines += ["mkdir \"$R/dev/shm\"; mount -t tmpfs -o mode=1777,nosuid,nodev shm \"$R/dev/shm\"",
                  f"touch \"$R/dev/termination-log\"; mount --bind "
                  f"{q(os.path.join(self.dir, 'termination-log'))} \"$R/dev/termination-log\""]
        for m in self.container.get("volumeMounts", []):
            dst = "$R" + m["mountPath"]
            lines.append(f"mkdir -p \"{dst}\"; mount --bind {q(self.volumes[m['name']])} \"{dst}\"")
            if m.get("readOnly"):
                lines.append(f"mount -o remount,bind,ro \"{dst}\"")
        if csc.get("readOnlyRootFilesystem"):
            lines.append("mount -o remount,ro \"$R\"")
        env = self._env()
        command = [expand(a, env) for a in self.container.get("command", [])]
        args = [expand(a, env) for a in self.container.get("args", [])]
        priv = ["/usr/bin/setpriv", f"--reuid={uid}", f"--regid={gid}",
                "--groups=" + ",".join(str(g) for g in groups) if groups else "--clear-groups",
                "--inh-caps=-all", "--bounding-set=-all"]
        if csc.get("allowPrivilegeEscalation") is False:
            priv.append("--no-new-privs")
        workdir = self.container.get("workingDir", "/")
        argv = (["chroot", r] + priv + ["--", "/usr/bin/env", "-i", "-C", workdir] +
                [f"{k}={v}" for k, v in env.items()] + command + args)
        lines.append("exec " + " ".join(q(a) for a in argv))
        return "\n".join(lines) + "\n"

    def start(self):
        with open(os.path.join(self.dir, "resolv.conf"), "w") as f:
            f.write(f"search {NAMESPACE}.svc.{DOMAIN} svc.{DOMAIN} {DOMAIN}\n"
                    "nameserver 127.0.0.1\noptions ndots:5\n")
        open(os.path.join(self.dir, "termination-log"), "w").close()
        self.c.write_hosts(self, force=True)
        script = os.path.join(self.dir, "start.sh")
        with open(script, "w") as f:
            f.write(self._script())
        self.log_offset = os.path.getsize(self.log) if os.path.exists(self.log) else 0
        logf = open(self.log, "ab")
        # ip netns exec, unshare, sh, chroot, setpriv and env each exec the next: the
        # process started here is the container's process itself.
        self.proc = subprocess.Popen(["ip", "netns", "exec", self.ns, "unshare", "--mount",
                                      "--uts", "--propagation", "private", "--", "sh", script],
                                     stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                     start_new_session=True)
        logf.close()
        self.c.pids_file_add(self.proc.pid)
        self.phase, self.started, self.ready, self.kill_at = "Running", False, False, None
        self.run_started = time.monotonic()
        self.probes = [Probe(k, self.container[k]) for k in
                       ("startupProbe", "livenessProbe", "readinessProbe") if k in self.container]
        if not any(p.kind == "startupProbe" for p in self.probes):
            self.started = True
        if not any(p.kind == "readinessProbe" for p in self.probes):
            self.ready = True
        self.c.event(f"pod {self.name}: container started, pid {self.proc.pid}"
                     + (f" (restart {self.restarts})" if self.restarts else ""))

    def exec(self, argv, timeout=30):
        """kubectl exec POD -- ARGV: in the container's namespaces and root, as its user with
        its groups and environment, no capabilities. A CompletedProcess."""
        uid, gid, _, groups, _ = self._security()
        cmd = (["nsenter", "-t", str(self.pid), "-n", "-m", "-u", "-r", "-w",
                "/usr/bin/setpriv", f"--reuid={uid}", f"--regid={gid}",
                "--groups=" + ",".join(str(g) for g in groups) if groups else "--clear-groups",
                "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--",
                "/usr/bin/env", "-i"] + [f"{k}={v}" for k, v in self._env().items()] + argv)
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)

    @property
    def pid(self):
        return self.proc.pid if self.proc and self.proc.returncode is None else None

    def http_get(self, port, path, timeout=2.0):
        """GET from the node, as kubelet's probes and a port-forward reach the pod:
        (status, body), or (None, reason)."""
        try:
            conn = http.client.HTTPConnection(self.ip, port, timeout=timeout)
            conn.request("GET", path)
            resp = conn.getresponse()
            body = resp.read().decode(errors="replace")
            conn.close()
            return resp.status, body
        except (OSError, http.client.HTTPException) as e:
            return None, str(e)

    def _probe_port(self, spec):
        port = spec["httpGet"]["port"]
        if isinstance(port, str):
            port = [p["containerPort"] for p in self.container["ports"] if p["name"] == port][0]
        return port

    def tick_probes(self):
        now = time.monotonic()
        if self.kill_at is not None:  # a failed probe's kill, past its grace period
            if now >= self.kill_at:
                self.kill(signal.SIGKILL)
            return
        for p in self.probes:
            if p.kind != "startupProbe" and not self.started:
                continue
            if p.kind == "startupProbe" and self.started:
                continue
            if p.future is not None:
                if not p.future.done():
                    continue
                status, _ = p.future.result()
                p.future = None
                ok = status is not None and 200 <= status < 400
                p.successes, p.failures = (p.successes + 1, 0) if ok else (0, p.failures + 1)
                if p.kind == "startupProbe" and ok:
                    self.started = True
                elif p.kind == "readinessProbe":
                    if ok and not self.ready:
                        self.ready = True
                        self.c.event(f"pod {self.name} ready")
                    elif not ok and self.ready and p.failures >= p.failure_threshold:
                        self.ready = False
                        self.c.event(f"pod {self.name} not ready")
                elif not ok and p.failures >= p.failure_threshold:
                    self.c.event(f"pod {self.name}: {p.kind} failed {p.failures} times: killed")
                    self.kill(signal.SIGTERM)
                    self.kill_at = now + self.spec.get("terminationGracePeriodSeconds", 30)
                    return
            if p.future is None and now >= p.due:
                p.due = now + p.period
                p.future = self.c.pool.submit(self.http_get, self._probe_port(p.spec),
                                              p.spec["httpGet"]["path"], p.timeout)

    def kill(self, sig):
        if self.pid:
            os.kill(self.pid, sig)

    def reap(self):
        """The container has exited: its run's record, the termination message."""
        rc = self.proc.returncode
        code = rc if rc >= 0 else 128 - rc
        msg = open(os.path.join(self.dir, "termination-log"), "rb").read()[:4096]
        if not msg and code != 0 and \
                self.container.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            with open(self.log, "rb") as f:
                f.seek(self.log_offset)
                msg = b"\n".join(f.read().splitlines()[-80:])[-2048:]
        self.runs.append({"exit_code": code, "message": msg.decode(errors="replace"),
                          "seconds": time.monotonic() - self.run_started})
        self.proc, self.ready, self.started = None, False, False
        self.c.event(f"pod {self.name}: container exited with {code}")
        return code

    @property
    def exit_code(self):
        return self.runs[-1]["exit_code"] if self.runs else None

    def teardown(self):
        self.c.net.remove(self.ns)
        self.ns = None


def expand(text, env):
    """Kubernetes' $(VAR) references in command, args and env values ($$ escapes)."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i) and ")" in text[i:]:
            j = text.index(")", i)
            name = text[i + 2:j]
            out.append(env.get(name, text[i:j + 1]))
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


class Job:
    def __init__(self, obj):
        self.obj, self.spec = obj, obj["spec"]
        self.name = obj["metadata"]["name"]
        self.succeeded, self.failed, self.condition, self.message = set(), 0, None, ""
        self.not_before = {}
        self.pods_created = 0
        self.accounted = set()


class Cluster:
    def __init__(self, work, image_bin, image_user, prefix, subnet="10.213.29"):
        self.work, self.image_bin, self.image_user = work, image_bin, image_user
        for d in ("pods", "logs", "claims"):
            os.makedirs(os.path.join(work, d), exist_ok=True)
        self.pids_file = os.path.join(work, "pids")
        self.net = Network(prefix, subnet)
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=8)
        self.uid = 0
        self.pods = {}            # live API objects, by name
        self.history = []         # every pod ever made, in order
        self.configmaps, self.secrets = {}, {}
        self.services, self.statefulsets, self.jobs = {}, {}, {}
        self.events = []
        self.t0 = time.monotonic()

    def event(self, text):
        line = f"{time.monotonic() - self.t0:7.2f}s {text}"
        self.events.append(line)
        print(line, flush=True)

    def pids_file_add(self, pid):
        with open(self.pids_file, "a") as f:
            f.write(f"{pid}\n")

    def claim_dir(self, claim, fs_group):
        """A PersistentVolumeClaim's volume: outlives its pods; fsGroup's ownership change."""
        path = os.path.join(self.work, "claims", claim)
        if not os.path.isdir(path):
            os.makedirs(path)
            self.event(f"claim {claim} bound")
        if fs_group is not None:
            os.chown(path, 0, fs_group)
            os.chmod(path, 0o2775)
        return path

    # -- the API: objects --

    def apply(self, obj):
        kind, name = obj["kind"], obj["metadata"]["name"]
        if kind == "ConfigMap":
            self.configmaps[name] = {k: v.encode() for k, v in obj.get("data", {}).items()}
        elif kind == "Secret":
            data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
            data.update({k: v.encode() for k, v in (obj.get("stringData") or {}).items()})
            self.secrets[name] = data
        elif kind == "Service":
            self.services[name] = obj
        elif kind == "StatefulSet":
            self.statefulsets[name] = obj
        elif kind == "Job":
            self.jobs[name] = Job(obj)
        else:
            raise RuntimeError(f"cannot apply a {kind}")
        self.event(f"{kind.lower()}/{name} created")

    def delete_pod(self, name, force=False):
        """kubectl delete pod NAME [--force --grace-period=0]."""
        pod = self.pods[name]
        grace = 0 if force else pod.spec.get("terminationGracePeriodSeconds", 30)
        pod.deleting, pod.deadline = True, time.monotonic() + grace
        self.event(f"pod {name} deleted" + (" (--force: SIGKILL)" if force else ""))
        pod.kill(signal.SIGKILL if force else signal.SIGTERM)
        if pod.pid is None:
            pod.next_start = float("inf")

    def delete_job(self, name):
        """kubectl delete job NAME: the Job and its pods."""
        self.jobs.pop(name)
        for pod in list(self.pods.values()):
            if pod.owner == ("Job", name):
                if pod.pid:
                    self.delete_pod(pod.name)
                else:
                    del self.pods[pod.name]
        self.event(f"job/{name} deleted")

    def delete_statefulset(self, name):
        sts = self.statefulsets.pop(name)
        for pod in list(self.pods.values()):
            if pod.owner == ("StatefulSet", name):
                self.delete_pod(pod.name)
        self.event(f"statefulset/{sts['metadata']['name']} deleted")

    # -- controllers --

    def _statefulsets(self):
        for name, sts in self.statefulsets.items():
            tmpl = sts["spec"]["template"]
            for i in range(sts["spec"]["replicas"]):
                pod_name = f"{name}-{i}"
                if pod_name in self.pods:
                    continue
                claims = {t["metadata"]["name"]: f"{t['metadata']['name']}-{pod_name}"
                          for t in sts["spec"].get("volumeClaimTemplates", [])}
                self._add(Pod(self, pod_name, ("StatefulSet", name), tmpl["spec"],
                              tmpl["metadata"].get("labels", {}), hostname=pod_name,
                              subdomain=sts["spec"]["serviceName"], claims=claims, index=i))

    def _jobs(self):
        now = time.monotonic()
        for job in self.jobs.values():
            tmpl, spec = job.spec["template"], job.spec
            container = tmpl["spec"]["containers"][0]["name"]
            active = {}
            for pod in self.pods.values():
                if pod.owner != ("Job", job.name):
                    continue
                if pod.phase in ("Succeeded", "Failed") and pod.uid not in job.accounted:
                    job.accounted.add(pod.uid)
                    if pod.phase == "Succeeded":
                        job.succeeded.add(pod.index)
                        continue
                    action = kube_manifests.failure_action(spec.get("podFailurePolicy"),
                                                           container, pod.exit_code)
                    self.event(f"job/{job.name}: pod {pod.name} failed with {pod.exit_code}: "
                               f"{action}")
                    if action in ("FailJob", "FailIndex"):
                        self._fail(job, "PodFailurePolicy",
                                   f"Container {container} for pod {NAMESPACE}/{pod.name} failed "
                                   f"with exit code {pod.exit_code} matching {action} rule")
                    elif action == "Count":
                        job.failed += 1
                        delay = min(JOB_BACKOFF_S * 2 ** (job.failed - 1), 360)
                        job.not_before[pod.index] = now + delay
                        if job.failed > spec.get("backoffLimit", 6):
                            self._fail(job, "BackoffLimitExceeded",
                                       "Job has reached the specified backoff limit")
                elif pod.phase in ("Pending", "Running"):
                    active[pod.index] = pod
            if job.condition:
                continue
            if len(job.succeeded) == spec["completions"]:
                job.condition = "Complete"
                self.event(f"job/{job.name} complete")
                continue
            for i in range(spec["completions"]):
                if i in job.succeeded or i in active or len(active) >= spec["parallelism"]:
                    continue
                if now < job.not_before.get(i, 0):
                    continue
                suffix = "".join(random.choice(string.ascii_lowercase + string.digits)
                                 for _ in range(5))
                name = f"{job.name}-{i}-{suffix}"
                pod = Pod(self, name, ("Job", job.name), tmpl["spec"],
                          tmpl["metadata"].get("labels", {}), hostname=name,
                          env_extra={INDEX_ENV: str(i)}, index=i)
                job.pods_created += 1
                active[i] = pod
                self._add(pod)

    def _fail(self, job, reason, message):
        if job.condition:
            return
        job.condition, job.message = "Failed", f"{reason}: {message}"
        self.event(f"job/{job.name} failed: {job.message}")
        for pod in self.pods.values():
            if pod.owner == ("Job", job.name) and pod.pid:
                self.delete_pod(pod.name)

    def _add(self, pod):
        self.pods[pod.name] = pod
        self.history.append(pod)

    # -- kubelet --

    def _kubelet(self):
        now = time.monotonic()
        for pod in list(self.pods.values()):
            if pod.proc is not None and pod.proc.poll() is not None:
                code = pod.reap()
                policy = pod.spec.get("restartPolicy", "Always")
                if pod.deleting:
                    pod.phase = "Failed" if code else "Succeeded"
                elif policy == "Always" or (policy == "OnFailure" and code != 0):
                    delay = min(CRASH_BACKOFF_S * 2 ** pod.restarts, 300)
                    pod.next_start = now + delay
                    pod.restarts += 1
                    self.event(f"pod {pod.name}: back-off {delay} s restarting the container")
                else:
                    pod.phase = "Succeeded" if code == 0 else "Failed"
                if pod.phase in ("Succeeded", "Failed"):
                    pod.teardown()
                    if pod.deleting:
                        del self.pods[pod.name]
                continue
            if pod.deleting:
                if pod.proc is None:  # deleted between restarts
                    pod.phase = "Failed"
                    pod.teardown()
                    del self.pods[pod.name]
                elif now >= pod.deadline:
                    pod.kill(signal.SIGKILL)
                continue
            if pod.proc is None and pod.phase in ("Pending", "Running") and now >= pod.next_start:
                pod.start()
            if pod.proc is not None:
                pod.tick_probes()

    # -- DNS --

    def _records(self):
        lines = []
        for svc_name, svc in self.services.items():
            if svc["spec"].get("clusterIP") != "None":
                continue
            publish = svc["spec"].get("publishNotReadyAddresses", False)
            for pod in self.pods.values():
                if pod.ns is None or pod.deleting or pod.proc is None:
                    continue
                if not all(pod.labels.get(k) == v for k, v in svc["spec"]["selector"].items()):
                    continue
                if not (pod.ready or publish):
                    continue
                names = [f"{svc_name}.{NAMESPACE}.svc.{DOMAIN}", f"{svc_name}.{NAMESPACE}",
                         svc_name]
                if pod.subdomain == svc_name:
                    base = f"{pod.hostname}.{svc_name}"
                    names = [f"{base}.{NAMESPACE}.svc.{DOMAIN}", f"{base}.{NAMESPACE}", base] + \
                        names
                lines.append(f"{pod.ip}\t{' '.join(names)}")
        return lines

    def write_hosts(self, pod, force=False, records=None):
        records = self._records() if records is None else records
        own = pod.hostname if not pod.subdomain else \
            f"{pod.hostname}.{pod.subdomain}.{NAMESPACE}.svc.{DOMAIN} {pod.hostname}"
        text = ("# Kubernetes-managed hosts file (simulated: kube_sim.py).\n127.0.0.1\tlocalhost\n"
                f"{pod.ip}\t{own}\n" + "".join(r + "\n" for r in records))
        path = os.path.join(pod.dir, "hosts")
        if not force and getattr(pod, "hosts_text", None) == text:
            return
        # In place (one write), so that the file bound on the pod's /etc/hosts changes.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, text.encode())
        os.close(fd)
        pod.hosts_text = text

    def _dns(self):
        records = self._records()
        for pod in self.pods.values():
            if pod.ns is not None:
                self.write_hosts(pod, records=records)

    # -- running --

    def tick(self):
        self._statefulsets()
        self._jobs()
        self._kubelet()
        self._dns()

    def run_until(self, what, pred, timeout):
        deadline = time.monotonic() + timeout
        while True:
            self.tick()
            got = pred()
            if got:
                return got
            if time.monotonic() > deadline:
                raise TimeoutError(f"not within {timeout} s: {what}")
            time.sleep(0.05)

    def pods_of(self, owner_kind, owner_name):
        return [p for p in self.history if p.owner == (owner_kind, owner_name)]

    def table(self):
        """kubectl get pods -o wide, more or less."""
        rows = [f"{'NAME':32} {'PHASE':10} {'READY':6} {'RESTARTS':8} {'IP':15} EXITS"]
        for p in self.history:
            phase = "Deleted" if p.name not in self.pods or self.pods[p.name] is not p else p.phase
            rows.append(f"{p.name:32} {phase:10} {str(p.ready):6} {p.restarts:<8} {p.ip:15} "
                        f"{[r['exit_code'] for r in p.runs]}")
        return "\n".join(rows)

    def close(self):
        for pod in self.pods.values():
            pod.kill(signal.SIGKILL)
        for pod in self.pods.values():
            if pod.proc is not None:
                try:
                    pod.proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass
            if pod.ns:
                pod.teardown()
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.net.close()
