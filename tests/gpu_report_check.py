#!/usr/bin/env python3
"""Checks a `pstrain gpu-check` report.json (tests/gpu_check_test.sh, tests/bundle_test.sh).

    gpu_report_check.py REPORT pass   every check ran and passed: the devices, the data, the
                                      five parity tests, six presets and mobilenetv2 on 2
                                      stages, two workers on one device, eight bench-train runs,
                                      issue 41's step, transport and CPU workers checks, the
                                      slow links (issue 27); their figures are sane
    gpu_report_check.py REPORT nogpu  the run stopped at the devices check, which failed

Numbers are compared as numbers; exits non-zero with one line on the first problem."""
import json
import math
import sys


def fail(why):
    print(f"gpu_report_check: {why}", file=sys.stderr)
    sys.exit(1)


def main():
    report, want = sys.argv[1], sys.argv[2]
    with open(report) as f:
        doc = json.load(f)
    checks = doc["checks"]
    if want == "nogpu":
        if doc["verdict"] != "fail" or checks[0]["name"] != "devices" or \
                checks[0]["verdict"] != "fail" or len(checks) != 1:
            fail(f"expected one failed devices check, got {[(c['name'], c['verdict']) for c in checks]}")
        if checks[0]["figures"].get("cuda_devices", -1) != 0:
            fail("the devices check counts CUDA devices here")
        return
    if doc["verdict"] != "pass":
        fail(f"verdict {doc['verdict']}: {[(c['name'], c['detail']) for c in checks if c['verdict'] != 'pass']}")
    kinds = {"devices": 0, "data": 0, "parity": 0, "train": 0, "two": 0, "bench-train": 0,
             "step:": 0, "transport:": 0, "cpu": 0, "slow": 0}
    for c in checks:
        if c["verdict"] != "pass" or not c["detail"] or "\n" in c["detail"]:
            fail(f"{c['name']}: {c['verdict']}: {c['detail']!r}")
        if not (c["seconds"] >= 0):
            fail(f"{c['name']}: seconds {c['seconds']}")
        kind = c["name"].split()[0]
        if kind not in kinds:
            fail(f"unexpected check {c['name']}")
        kinds[kind] += 1
        fig = c["figures"]
        if kind == "parity" and not (fig["passed"] > 0 and fig["failed"] == 0):
            fail(f"{c['name']}: {fig}")
        if kind in ("train", "two"):
            if not (fig["steps"] > 0 and fig["loss_reports"] >= 1 and
                    all(math.isfinite(fig[k]) for k in ("first_loss", "last_loss", "test_loss")) and
                    0 <= fig["test_accuracy"] <= 1 and fig["samples_per_sec"] > 0):
                fail(f"{c['name']}: {fig}")
        if kind == "bench-train":
            rates = [v for k, v in fig.items() if k.endswith("samples_per_sec")]
            computes = [v for k, v in fig.items() if k.endswith("per_worker")]
            if not rates or not computes or min(rates) <= 0 or min(computes) <= 0:
                fail(f"{c['name']}: {fig}")
        if kind == "step:":
            # The device's job against its compute-only rate, and the emulated worker's at it.
            if not (fig["samples_per_sec"] > 0 and fig["compute_samples_per_sec"] > 0 and
                    fig["emulated_samples_per_sec"] > 0 and
                    math.isclose(fig["compute_share"],
                                 fig["samples_per_sec"] / fig["compute_samples_per_sec"]) and
                    math.isclose(fig["emulated_share"],
                                 fig["emulated_samples_per_sec"] / fig["compute_samples_per_sec"]) and
                    math.isclose(fig["points_from_emulated"],
                                 100 * abs(fig["compute_share"] - fig["emulated_share"]),
                                 abs_tol=1e-9)):
                fail(f"{c['name']}: {fig}")
        if kind == "transport:" and not fig.get("ratio_1_mib", 0) > 0:
            fail(f"{c['name']}: {fig}")
        if kind == "cpu" and not (fig["cores"] >= 1 and fig["sync_1_samples_per_sec"] > 0 and
                                  fig["async_1_samples_per_sec"] > 0):
            fail(f"{c['name']}: {fig}")
        if kind == "slow":
            # Round trips measured over the links, and every encoding's time against float32's.
            if not (0 < fig["round_trip_ms_min"] <= fig["round_trip_ms_max"] < 1000 and
                    fig["none_samples_per_sec"] > 0 and 0 <= fig["none_test_accuracy"] <= 1 and
                    0 <= fig["delay_line_late_mean_ms"] and 0 <= fig["delay_line_late_p90_ms"] and
                    0 <= fig["delay_line_cpu_share"] <= 1 and 0 <= fig["host_steal_share"] <= 1):
                fail(f"{c['name']}: {fig}")
            for enc in ("fp16", "top-k"):
                if not (fig[f"{enc}_samples_per_sec"] > 0 and fig[f"{enc}_time_share"] > 0 and
                        fig[f"{enc}_samples_share"] > 0 and
                        fig[f"{enc}_wire_bytes_per_update"] > 0 and
                        math.isfinite(fig[f"{enc}_points_below"])):
                    fail(f"{c['name']}: {enc}: {fig}")
    expected = {"devices": 1, "data": 1, "parity": 5, "train": 7, "two": 1, "bench-train": 8,
                "step:": 1, "transport:": 1, "cpu": 1, "slow": 1}
    if kinds != expected:
        fail(f"checks by kind {kinds}, expected {expected}")


if __name__ == "__main__":
    main()
