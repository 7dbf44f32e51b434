"""A pod of tests/kube_sim.py's simulated cluster: what kubelet does for one pod on this
machine (its volumes, its container's root, identity and start, its probes, its end), and
`kubectl exec` into it. Pod.c is the Cluster (kube_sim.py) it belongs to, for the network,
the objects its volumes come from, the cluster DNS and the thread pool of the probes."""
import http.client
import os
import shlex
import signal
import subprocess
import time

NAMESPACE = "default"
DOMAIN = "cluster.local"
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What the image's /etc holds besides what kubelet mounts (hosts, resolv.conf, hostname).
IMAGE_ETC = ["alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group",
             "host.conf", "gai.conf"]
DEVICES = ["null", "zero", "full", "random", "urandom"]


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
