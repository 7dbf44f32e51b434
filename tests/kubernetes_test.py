"""tests/kubernetes_test: deploy/kubernetes/ read and run as a cluster would (kube_sim.py).

  1. The manifests: every field that ties them together, their numbers against the config
     files', the probes, the pod failure policy against pstrain's exit statuses, the
     hardening, the image recipe against the programs' libraries (kube_manifests.py), and
     `kubectl kustomize` where a kubectl is installed.
  2. A configuration error in the workers' ConfigMap: each worker pod runs once, exits 2
     with the reason as its termination message, and the Job fails by its pod failure
     policy at once, with no pod replaced.
  3. The job: the ps StatefulSet (its pod ready by /readyz, its name in the cluster's DNS only
     then) and the Indexed Job of workers, which find the ps by the Service's DNS names and
     their index by JOB_COMPLETION_INDEX. A worker pod is deleted with --force (kill -9): the
     Job makes a new pod with the same index, at a new address, which rejoins its slot. The ps
     pod is deleted (SIGTERM): it checkpoints and stops its workers (exit 3), the Job
     replaces them without counting, the StatefulSet makes pstrain-ps-0 again on the same
     volume and it goes on from where it stopped. Then it is deleted with --force (kill -9):
     pstrain-ps-0 again, at a new address, resumes from its newest checkpoint; the workers
     reconnect by name. The Job completes; the summary on the volume says finished,
     resumed, and the test accuracy; the finished ps stays up (/readyz 503, no restart)
     until the StatefulSet is deleted, and then exits 0.
  4. The same job straight on one host (the ConfigMap's files, the cluster's settings
     overridden by flags): the same weights, bit for bit.
  5. Elastic workers (the elastic/ component: workers = 2:4): the worker Job grown 2 -> 4
     after epoch 1 and shrunk 4 -> 2 half-way through epoch 3 by patching its parallelism and
     completions together; the scaled-away pods get SIGTERM, exit 0 and are not counted; the
     ps's records say every sample was trained once per epoch (data_coverage.py) and 2
     departures, no loss; the accuracy is within 0.5 points of a fixed 2-worker job.
The test's own edits to the ConfigMap (as a user's `kubectl edit`): ps.conf trains 4 epochs
(1872 steps) with a checkpoint every 100 steps, so that the kills (by version 500 or so) fall
mid-run and a checkpoint exists;
the Secret is secret.yaml with a random secret filled in (as README's kubectl command)."""
import argparse
import copy
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time

import kube_manifests
import kube_pod
import kube_sim

passed = 0


def ok(text):
    global passed
    passed += 1
    print(f"PASS: {text}", flush=True)


def fail(text, cluster=None):
    print(f"FAIL: {text}", flush=True)
    if cluster is not None:
        print(cluster.table())
        for pod in cluster.history[-6:]:
            print(f"--- {pod.log}")
            try:
                print("".join(open(pod.log, errors="replace").readlines()[-15:]))
            except OSError:
                pass
    print(f"{passed} passed, 1 failed")
    sys.exit(1)


def edit_conf(text, key, value):
    """Sets key in an INI text: its line replaced, or added at the end."""
    new, n = re.subn(rf"^{re.escape(key)} = .*$", f"{key} = {value}", text, flags=re.M)
    return new if n else text.rstrip("\n") + f"\n{key} = {value}\n"


def status_json(pod):
    code, body = pod.http_get(9090, "/status.json")
    return json.loads(body) if code == 200 else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--manifests", required=True)
    ap.add_argument("--units-ps-conf", required=True)
    ap.add_argument("--containerfile", required=True)
    ap.add_argument("--image-packages", required=True, help="packages.txt of build.sh's context")
    ap.add_argument("--programs", nargs=3, required=True, help="pstrain-ps pstrain-worker pstrain")
    ap.add_argument("--work", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--min-accuracy", type=float, required=True)
    ap.add_argument("--passed-before", type=int, default=0, help="checks the caller passed")
    a = ap.parse_args()
    global passed
    passed = a.passed_before

    # 1. The manifests.
    m = kube_manifests.Manifests(a.manifests)
    problems = kube_manifests.check(m, a.units_ps_conf, a.containerfile)
    problems += kube_manifests.check_image_libraries(a.image_packages, a.programs)
    kproblems, note = kube_manifests.kustomize_check(m)
    if problems + kproblems:
        fail("the manifests:\n  " + "\n  ".join(problems + kproblems))
    ok(f"manifests: {len(m.objs)} objects, the Secret template, the monitors and the gpu "
       f"component hang together; the image installs every library the programs link; {note}")

    # The image: the Containerfile's programs, where it puts them.
    image_user, image_programs = kube_manifests.read_containerfile(a.containerfile)
    image_bin = os.path.join(a.work, "image-bin")
    os.makedirs(image_bin)
    for prog in a.programs:
        dest = os.path.join(image_bin, os.path.basename(prog))
        shutil.copy(prog, dest)
        os.chmod(dest, 0o755)
        if os.path.join("/usr/local/bin", os.path.basename(prog)) not in image_programs:
            fail(f"the Containerfile does not put {os.path.basename(prog)} in /usr/local/bin")
    secret = copy.deepcopy(m.secret)
    secret["stringData"] = {"pstrain-secret": secrets.token_hex(32)}

    cluster = kube_sim.Cluster(a.work, image_bin, image_user, a.prefix)
    try:
        run(a, m, cluster, secret)
    except TimeoutError as e:
        fail(str(e), cluster)
    finally:
        cluster.close()
    print(f"{passed} passed, 0 failed")


def run(a, m, cluster, secret):
    # 2. A configuration error: worker.conf with a key no worker knows.
    bad = copy.deepcopy(m.configmap)
    bad["data"]["worker.conf"] += "epoch = 3\n"
    for obj in (bad, secret, m.job):
        cluster.apply(copy.deepcopy(obj))
    job = cluster.jobs["pstrain-worker"]
    t0 = time.monotonic()
    cluster.run_until("the Job fails on the configuration error", lambda: job.condition, 60)
    took = time.monotonic() - t0
    # Time for any replacement to show up, had the policy let one be made.
    end = time.monotonic() + 3
    while time.monotonic() < end:
        cluster.tick()
        time.sleep(0.05)
    pods = cluster.pods_of("Job", "pstrain-worker")
    if job.condition != "Failed" or not job.message.startswith("PodFailurePolicy"):
        fail(f"the Job ended {job.condition} ({job.message}), not failed by its pod failure "
             "policy", cluster)
    workers = m.job["spec"]["completions"]
    if len(pods) != workers or any(len(p.runs) != 1 or p.exit_code != 2 for p in pods):
        fail(f"want {workers} pods that ran once and exited 2, got "
             f"{[(p.name, [r['exit_code'] for r in p.runs]) for p in pods]}", cluster)
    for p in pods:
        msg = p.runs[0]["message"]
        if "/etc/pstrain/worker.conf" not in msg or "epoch" not in msg:
            fail(f"pod {p.name}'s termination message does not name the file and the key: "
                 f"{msg!r}", cluster)
    ok(f"a configuration error: {workers} worker pods ran once each, exited 2 with the reason "
       f"as their message ({pods[0].runs[0]['message'].strip()!r}); the Job failed by its pod "
       f"failure policy {took:.1f} s after it was made, no pod replaced")
    cluster.delete_job("pstrain-worker")

    # 3. The job, with the test's edits to ps.conf.
    cm = copy.deepcopy(m.configmap)
    ps_conf = cm["data"]["ps.conf"]
    # 4 epochs: the kills are done by version 500 or so, of 1872; 8 (3744 steps) checked
    # nothing more and trained both jobs of 3 and 4 twice as long.
    ps_conf = edit_conf(ps_conf, "epochs", "4")
    ps_conf = edit_conf(ps_conf, "checkpoint-every", "100")
    cm["data"]["ps.conf"] = ps_conf
    for obj in (cm, m.service, m.statefulset, m.job):
        cluster.apply(copy.deepcopy(obj))
    job = cluster.jobs["pstrain-worker"]
    ps = lambda: cluster.pods.get("pstrain-ps-0")
    cluster.run_until("pstrain-ps-0 ready", lambda: ps() and ps().ready, 60)
    first_ps = ps()
    claim = os.path.join(cluster.work, "claims", "state-pstrain-ps-0")
    ckpt_dir = os.path.join(claim, "checkpoints")

    def progress(min_version, names=None):
        st = status_json(ps())
        if not st or st["version"] < min_version:
            return None
        slots = st["worker_slots"]
        if names is not None and not all(
                any(s["index"] == i and s["connected"] and n in s["name"] for s in slots)
                for i, n in names.items()):
            return None
        return st

    def job_pod(index):
        live = [p for p in cluster.pods.values()
                if p.owner == ("Job", "pstrain-worker") and p.index == index and p.pid]
        return live[0] if live else None

    st = cluster.run_until("both workers registered and a checkpoint written",
                           lambda: job_pod(0) and job_pod(1) and
                           any(f.endswith(".safetensors") for f in os.listdir(ckpt_dir)) and
                           progress(150, {0: job_pod(0).name, 1: job_pod(1).name}), 120)
    # The daemons run as the securityContext says: its user, the fsGroup, no capabilities,
    # no privilege escalation (what the simulated runtime set up, read back from /proc).
    for pod in (first_ps, job_pod(0)):
        fields = dict(line.split(":", 1) for line in open(f"/proc/{pod.pid}/status"))
        sc = pod.spec["securityContext"]
        ids = {str(sc["runAsUser"])}, {str(sc["runAsGroup"])}, {str(sc["fsGroup"])}
        got = set(fields["Uid"].split()), set(fields["Gid"].split()), set(fields["Groups"].split())
        if got != ids or int(fields["CapEff"], 16) or int(fields["CapBnd"], 16) or \
                fields["NoNewPrivs"].strip() != "1":
            fail(f"pod {pod.name}'s process runs as {got}, CapEff {fields['CapEff'].strip()}, "
                 f"CapBnd {fields['CapBnd'].strip()}, NoNewPrivs {fields['NoNewPrivs'].strip()}",
                 cluster)
    # deploy/README.md's way to watch: kubectl exec pstrain-ps-0 -- pstrain status, whose
    # cluster secret comes from the pod's CREDENTIALS_DIRECTORY.
    r = first_ps.exec(["pstrain", "status", "127.0.0.1:7070", "--json"])
    status = json.loads(r.stdout) if r.returncode == 0 else {}
    if status.get("registered") != 2 or status.get("version", 0) < st["version"]:
        fail(f"pstrain status in the ps pod: exit {r.returncode}, {r.stdout.strip()[:200]} "
             f"{r.stderr.strip()[-200:]}", cluster)
    ok(f"the ps pod (ready at {first_ps.ip}) and 2 worker pods, as uid {sc['runAsUser']} without "
       f"capabilities: both registered by name through the Service's DNS name, version "
       f"{st['version']}, a checkpoint on the volume; pstrain status in the ps pod says "
       f"{status['registered']} of {status['workers']} registered at version {status['version']}")

    # A worker pod deleted with --force (kill -9): the Job replaces it, same index.
    victim = job_pod(1)
    cluster.delete_pod(victim.name, force=True)
    cluster.run_until("a new pod for index 1 rejoins its slot",
                      lambda: job_pod(1) and job_pod(1) is not victim and
                      progress(0, {1: job_pod(1).name}), 120)
    new = job_pod(1)
    if victim.exit_code != 137 or new.ip == victim.ip:
        fail(f"the killed pod exited {victim.exit_code}; the new one is at {new.ip}", cluster)
    ok(f"worker pod {victim.name} deleted with --force (kill -9: exit 137, counted: failed "
       f"{job.failed}); its replacement {new.name} (index 1, {new.ip}) rejoined slot 1")

    # The ps pod deleted (kubectl delete pod: SIGTERM): it writes a checkpoint of where it
    # stands and stops its workers (exit 3 everywhere); the Job replaces the worker pods
    # without counting them, and pstrain-ps-0, made again on its volume, resumes from that
    # checkpoint: no step is lost.
    stopped_at = cluster.run_until("the ps's status", lambda: status_json(ps()), 30)["version"]
    failed = job.failed
    old_workers = [job_pod(0), job_pod(1)]
    cluster.delete_pod("pstrain-ps-0")
    cluster.run_until("pstrain-ps-0 made again, ready, both workers back",
                      lambda: ps() and ps() is not first_ps and ps().ready and job_pod(0) and
                      job_pod(1) and progress(0, {0: job_pod(0).name, 1: job_pod(1).name}), 120)
    second_ps = ps()
    st = status_json(second_ps)
    replaced = [job_pod(0), job_pod(1)]
    if first_ps.exit_code != 3 or [w.exit_code for w in old_workers] != [3, 3] or \
            job.failed != failed or any(n is o for n, o in zip(replaced, old_workers)):
        fail(f"a stopped ps pod: it exited {first_ps.exit_code}, its workers "
             f"{[w.exit_code for w in old_workers]}, failures counted {failed} -> {job.failed}",
             cluster)
    if not st or st["version"] < stopped_at or second_ps.ip == first_ps.ip:
        fail(f"the new ps pod at {second_ps.ip} ({first_ps.ip} before) stands at version "
             f"{st and st['version']}, before {stopped_at}, where its predecessor stopped", cluster)
    ok(f"ps pod deleted at version {stopped_at} (SIGTERM): it and its workers exited 3, the Job "
       f"replaced both worker pods without counting them ({replaced[0].name}, "
       f"{replaced[1].name}), pstrain-ps-0 again at {second_ps.ip} went on from where it stopped "
       f"(version {st['version']})")

    # The ps pod deleted with --force (kill -9): pstrain-ps-0 again, on the same volume,
    # resumes from its newest checkpoint; the workers reconnect to it by name.
    def newer_checkpoint():
        versions = [int(f[5:-12]) for f in os.listdir(ckpt_dir)
                    if f.startswith("ckpt-") and f.endswith(".safetensors")]
        return max(versions, default=0) > stopped_at
    at_kill = cluster.run_until("a checkpoint after the stop, and 150 steps past it",
                                lambda: newer_checkpoint() and progress(stopped_at + 150),
                                120)["version"]
    cluster.delete_pod("pstrain-ps-0", force=True)
    cluster.run_until("pstrain-ps-0 made again and ready",
                      lambda: ps() and ps() is not second_ps and ps().ready, 90)
    third_ps = ps()
    if third_ps.ip == second_ps.ip:
        fail("the new ps pod has the old one's address", cluster)
    cluster.run_until("the Job completes", lambda: job.condition, 240)
    if job.condition != "Complete":
        fail(f"the Job ended {job.condition}: {job.message}", cluster)
    summary = json.load(open(os.path.join(claim, "summary.json")))
    acc = summary["test_accuracy"]
    if not (summary["finished"] and summary["resumed"] and
            stopped_at < summary["resumed_from_version"] <= at_kill):
        fail(f"the summary does not say finished and resumed from a checkpoint between versions "
             f"{stopped_at} and {at_kill}: {summary}", cluster)
    if acc < a.min_accuracy:
        fail(f"test accuracy {acc} < {a.min_accuracy}", cluster)
    ok(f"ps pod deleted at version {at_kill} (--force, kill -9); pstrain-ps-0 again at "
       f"{third_ps.ip} resumed from version {summary['resumed_from_version']} on its volume, "
       f"the workers reconnected by name, the Job completed (2 indexes, {job.failed} failure "
       f"counted); test accuracy {acc}")

    # The finished ps stays up, not ready, until its StatefulSet goes.
    second_ps = third_ps
    cluster.run_until("the finished ps not ready", lambda: not second_ps.ready, 30)
    end = time.monotonic() + 3
    while time.monotonic() < end:
        cluster.tick()
        time.sleep(0.05)
    code, body = second_ps.http_get(9090, "/readyz")
    live, _ = second_ps.http_get(9090, "/healthz")
    if second_ps.pid is None or second_ps.restarts or second_ps.ready or code != 503 or live != 200:
        fail(f"the finished ps: running {second_ps.pid is not None}, restarts "
             f"{second_ps.restarts}, /readyz {code} {body!r}, /healthz {live}", cluster)
    cluster.delete_statefulset("pstrain-ps")
    cluster.run_until("the ps pod stops", lambda: second_ps.proc is None, 60)
    if second_ps.exit_code != 0:
        fail(f"the finished ps exited {second_ps.exit_code} on SIGTERM", cluster)
    ok(f"the finished ps stayed up, not ready (/readyz 503: {body.strip()!r}), with no "
       "restart, until its StatefulSet was deleted; then it exited 0")
    print(cluster.table())

    # 4. The same job straight, on one host: in sync mode, with the steps waiting for a lost
    # worker's replacement (on-worker-loss = wait) and the ps replaying from its checkpoint,
    # the kills change nothing, bit for bit.
    ref = straight_run(a, cm, cluster.work)
    if ref["weights_checksum"] != summary["weights_checksum"] or \
            ref["test_accuracy"] != summary["test_accuracy"]:
        fail(f"the job with its kills ended with weights {summary['weights_checksum']} (test "
             f"accuracy {summary['test_accuracy']}), the same job straight with "
             f"{ref['weights_checksum']} ({ref['test_accuracy']})")
    ok(f"the same job straight on one host: the same weights ({ref['weights_checksum']}) and "
       f"test accuracy {ref['test_accuracy']}")

    elastic(a, m, cluster)


def elastic(a, m, cluster):
    """5. The elastic component's job, grown and shrunk while it runs."""
    cluster.delete_job("pstrain-worker")
    claim = os.path.join(cluster.work, "claims", "state-pstrain-ps-0")
    shutil.rmtree(claim)  # kubectl delete pvc: a new job
    cm = copy.deepcopy(m.configmap)
    ps_conf = cm["data"]["ps.conf"]
    for key, value in (("epochs", "4"), ("batch-size", "256"), ("seed", "7")):
        ps_conf = edit_conf(ps_conf, key, value)
    fixed = copy.deepcopy(cm)  # the baseline: 2 fixed workers, static shards
    fixed["data"]["ps.conf"] = ps_conf
    ps_conf = edit_conf(ps_conf, "lr-scaling", "linear")  # as tests/elastic_test.sh
    cm["data"]["ps.conf"] = edit_conf(ps_conf, "metrics", "/var/lib/pstrain/metrics.jsonl")
    sts, job_obj = kube_manifests.apply_component([m.statefulset, m.job], m.elastic)
    for obj in (cm, sts, job_obj):
        cluster.apply(copy.deepcopy(obj))
    job = cluster.jobs["pstrain-worker"]
    metrics = os.path.join(claim, "metrics.jsonl")

    def records():
        try:
            return [json.loads(l) for l in open(metrics) if l.endswith("\n")]
        except OSError:
            return []

    def seen(pred):
        return any(pred(r) for r in records())

    t0 = time.monotonic()
    cluster.run_until("epoch 1 trained by 2 workers",
                      lambda: seen(lambda r: r.get("event") == "data_epoch" and r["epoch"] == 1),
                      180)
    cluster.patch_job("pstrain-worker", 4, 4)
    cluster.run_until("4 workers training",
                      lambda: seen(lambda r: r.get("event") == "workers" and r["workers"] == 4),
                      120)
    grown = [p for p in cluster.pods.values() if p.owner == ("Job", "pstrain-worker")
             and p.index >= 2 and p.pid]
    def trained():
        return sum(r["count"] for r in records()
                   if r.get("event") == "data" and r["what"] == "trained")
    at_four = trained()
    cluster.run_until("half an epoch trained by 4 workers",
                      lambda: trained() >= at_four + 30000, 180)
    cluster.patch_job("pstrain-worker", 2, 2)
    cluster.run_until("the Job completes", lambda: job.condition, 240)
    took = time.monotonic() - t0
    summary = json.load(open(os.path.join(claim, "summary.json")))
    if job.condition != "Complete" or job.failed:
        fail(f"the elastic Job ended {job.condition} ({job.message}), {job.failed} failures "
             "counted", cluster)
    if len(grown) != 2 or any(p.exit_code != 0 for p in grown):
        fail(f"the scaled-away pods: {[(p.name, p.exit_code) for p in grown]}, want 2 that "
             "exited 0", cluster)
    cover = subprocess.run(["/usr/bin/python3", os.path.join(os.path.dirname(
        os.path.abspath(__file__)), "data_coverage.py"), metrics, "60000", "4"],
        capture_output=True, text=True)
    if cover.returncode != 0:
        fail(f"the elastic job's records: not every sample once per epoch:\n{cover.stdout}",
             cluster)
    counts = [r["workers"] for r in records() if r.get("event") == "workers"]
    if summary.get("workers_departed") != 2 or summary.get("workers_lost") != 0 or \
            4 not in counts or 2 not in counts[counts.index(4):]:
        fail(f"the elastic job: departed {summary.get('workers_departed')}, lost "
             f"{summary.get('workers_lost')}, workers over time {counts}", cluster)
    ref = straight_run(a, fixed, cluster.work, "straight-fixed")
    acc, racc = summary["test_accuracy"], ref["test_accuracy"]
    if abs(acc - racc) > 0.005:
        fail(f"the elastic job's accuracy {acc} is more than 0.5 points from a fixed 2-worker "
             f"job's {racc}")
    ok(f"elastic workers (workers 2:4): the Job patched 2 -> 4 -> 2 while it ran; the 2 "
       f"scaled-away pods ({', '.join(p.name for p in grown)}) exited 0, not counted (failed "
       f"{job.failed}); the ps's records: every sample once in each of 4 epochs, "
       f"{summary['workers_departed']} departures, {summary['workers_lost']} lost, workers "
       f"{'->'.join(str(c) for c in counts if c)}; test accuracy {acc} (2 fixed workers: {racc}); "
       f"{took:.0f} s")
    cluster.delete_statefulset("pstrain-ps")
    cluster.run_until("the ps pod stops", lambda: not any(
        p.pid for p in cluster.pods.values() if p.owner == ("StatefulSet", "pstrain-ps")), 60)


def straight_run(a, cm, work, name="straight"):
    """The job of the ConfigMap's files without Kubernetes: one ps and the workers on this
    namespace's loopback, the cluster's settings overridden by flags (no k8s-ps, no volume,
    no ports), in as bare an environment as the pods'. Its summary."""
    d = os.path.join(work, name)
    os.makedirs(d)
    conf = {}
    for key in ("ps.conf", "worker.conf"):
        conf[key] = os.path.join(d, key)
        with open(conf[key], "w") as f:
            f.write(cm["data"][key])
    env = {"PATH": kube_pod.IMAGE_PATH}
    common = ["--k8s-ps", "", "--metrics-listen", ""]
    procs = [subprocess.Popen(
        [a.programs[0], "--config", conf["ps.conf"], "--listen", "127.0.0.1:7070",
         "--checkpoint-dir", "", "--summary-json", os.path.join(d, "summary.json"),
         "--on-finish", "exit"] + common, env=env, stdout=open(os.path.join(d, "ps.log"), "w"),
        stderr=subprocess.STDOUT)]
    for i in range(int(kube_manifests.parse_conf(cm["data"]["ps.conf"])["workers"])):
        procs.append(subprocess.Popen(
            [a.programs[1], "--config", conf["worker.conf"], "--ps", "127.0.0.1:7070",
             "--index", str(i)] + common, env=env,
            stdout=open(os.path.join(d, f"worker{i}.log"), "w"), stderr=subprocess.STDOUT))
    end = time.monotonic() + 300
    while any(p.poll() is None for p in procs) and time.monotonic() < end:
        if any(p.returncode for p in procs):
            break
        time.sleep(0.1)
    for p in procs:
        if p.poll() != 0:
            for q in procs:
                if q.poll() is None:
                    q.kill()
            log = os.path.join(d, "ps.log")
            fail(f"the straight run's {p.args[0]} exited {p.returncode} (logs in {d}): "
                 f"{open(log).read().strip().splitlines()[-1:]}")
    return json.load(open(os.path.join(d, "summary.json")))


if __name__ == "__main__":
    main()
