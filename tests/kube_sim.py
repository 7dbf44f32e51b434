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

The pods themselves, kubelet's part, are kube_pod.py's. Needs root, iproute2 (ip netns),
util-linux (unshare, setpriv, nsenter) and coreutils' chroot."""
import base64
import concurrent.futures
import ctypes
import os
import random
import signal
import string
import subprocess
import time

import kube_manifests
from kube_pod import DOMAIN, NAMESPACE, Pod

CLONE_NEWNET = 0x40000000
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

    def patch_job(self, name, parallelism, completions):
        """kubectl patch job NAME --type merge -p '{"spec": {"parallelism": P, "completions":
        C}}': an elastic Indexed Job (Kubernetes 1.31+) may change its completions only
        together with parallelism, equal before and after, as the API server requires. The
        controller then deletes the pods whose index is C or more (SIGTERM), counting none of
        them, and makes the new indexes' pods."""
        job = self.jobs[name]
        spec = job.spec
        if spec.get("completionMode") != "Indexed" or spec["completions"] != spec["parallelism"] \
                or parallelism != completions:
            raise RuntimeError(f"job/{name}: spec.completions may change only with parallelism, "
                               "equal to it, in an Indexed Job")
        spec["parallelism"], spec["completions"] = parallelism, completions
        job.succeeded = {i for i in job.succeeded if i < completions}
        self.event(f"job/{name} patched: parallelism and completions {completions}")
        for pod in list(self.pods.values()):
            if pod.owner == ("Job", name) and pod.index >= completions and pod.pid \
                    and not pod.deleting:
                self.delete_pod(pod.name)

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
            for pod in list(self.pods.values()):
                if pod.owner != ("Job", job.name):
                    continue
                if pod.phase in ("Succeeded", "Failed") and pod.uid not in job.accounted:
                    job.accounted.add(pod.uid)
                    if pod.deleting:  # its finalizer lifted: the deleted pod goes now
                        del self.pods[pod.name]
                    if pod.index >= spec["completions"]:  # scaled away: not counted
                        self.event(f"job/{job.name}: pod {pod.name} (index {pod.index}, beyond "
                                   f"{spec['completions']}) ended {pod.exit_code}: not counted")
                        continue
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
                elif pod.phase in ("Pending", "Running") and pod.index < spec["completions"]:
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

    def _job_tracks(self, pod):
        """A Job's pods carry its finalizer (batch.kubernetes.io/job-tracking): a deleted one
        stays until the Job has counted it, as failed when it did not succeed."""
        return pod.owner[0] == "Job" and pod.owner[1] in self.jobs and \
            pod.uid not in self.jobs[pod.owner[1]].accounted

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
                    if pod.deleting and not self._job_tracks(pod):
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
