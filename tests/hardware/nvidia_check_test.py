#!/usr/bin/env python3
"""The hardware check (tests/hardware/nvidia-check.sh) without a GPU: the
real nodewatchd on the fake NVML, against fake-nvidia-smi, which prints what
the fake NVML reports (tests/fixtures/nvml/README.md), and a sysfs tree with
the GPUs' PCIe links as fake-nvidia-smi reports them.

  - both fakes consistent (drivers 550+ element names, and an old driver's
    with the fake's old library): every comparable pair AGREE, exit 0;
  - one value off (GPU 3's temperature by 10 C): DISAGREE for exactly that
    pair, exit 1; a GPU that only nvidia-smi lists: DISAGREE, exit 1;
  - no nvidia-smi, no GPU, no driver: exit 2; a nodewatchd that does not
    finish within --timeout: exit 1;
  - the two nvidia-smi reads bracket nodewatch's: a counter between them
    agrees, one outside does not;
  - a host-link load step that cannot run (no PyTorch) says so and leaves
    the comparison's status;
  - a driver answer nodewatch does not expect (a field of another value
    type) fails the check, though every value agrees.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CHECK = os.path.join(HERE, "nvidia-check.sh")
COMPARE = os.path.join(HERE, "nvidia_compare.py")
FAKE_SMI = os.path.join(HERE, "fake-nvidia-smi")
DEVICES = 9  # the fake NVML sets throttle reason bit i on GPU i: 9 GPUs show all 9

ARGS = None

# What each GPU agrees on, for each pair of fakes; the rest is SKIP.
IDENTITY = ["up", "model", "serial", "pci_bus_id"]
COMMON = IDENTITY + [
    "utilization.gpu", "utilization.memory", "memory.used", "memory.total", "temperature.gpu",
    "power.draw", "power.limit", "clock.graphics", "clock.sm", "clock.memory",
    "throttle.gpu_idle", "throttle.applications_clocks_setting", "throttle.sw_power_cap",
    "throttle.hw_slowdown", "throttle.hw_thermal", "throttle.hw_power_brake", "throttle.sync_boost",
    "throttle.sw_thermal", "throttle.display_clock_setting", "ecc.volatile.corrected",
    "ecc.volatile.uncorrected", "remapped_rows.correctable", "remapped_rows.uncorrectable",
    "remapped_rows.pending", "remapped_rows.failed", "pcie.replay_counter", "pcie.link.gen.current",
    "pcie.link.width.current", "host_link.pcie.capacity"]
THROTTLE_TIME = ["throttle_time.sw_power_cap", "throttle_time.sync_boost", "throttle_time.sw_thermal",
                 "throttle_time.hw_thermal", "throttle_time.hw_power_brake"]
AGREE_V12 = set(COMMON + THROTTLE_TIME + ["temperature.memory", "pcie.link.gen.max"])
# The old library has no field values (memory temperature, throttle time);
# old nvidia-smi has no max_device_link_gen but the absolute slowdown threshold.
AGREE_OLD = set(COMMON + ["temperature.slowdown"])


def uuid(i):
    return f"GPU-00000000-0000-4000-8000-0000000000{i:02d}"


def make_sysfs(root):
    """The GPUs' functions, at the fake NVML's addresses, under one host
    bridge, each at 32 GT/s x16 (fake-nvidia-smi's PCIE_GEN, PCIE_WIDTH)."""
    os.makedirs(os.path.join(root, "bus", "pci", "devices"))
    for i in range(DEVICES):
        bdf = f"0000:{0x1a + 0x10 * i:02x}:00.0"
        d = os.path.join(root, "devices", "pci0000:00", bdf)
        os.makedirs(os.path.join(d, "power"))
        for name, text in (("class", "0x030200"), ("vendor", "0x10de"), ("device", "0x2330"),
                           ("numa_node", "0"), ("power/runtime_status", "active"),
                           ("current_link_speed", "32.0 GT/s PCIe"), ("max_link_speed", "32.0 GT/s PCIe"),
                           ("current_link_width", "16"), ("max_link_width", "16")):
            with open(os.path.join(d, name), "w", encoding="utf-8") as f:
                f.write(text + "\n")
        os.symlink(f"../../../devices/pci0000:00/{bdf}", os.path.join(root, "bus", "pci", "devices", bdf))


class NvidiaCheckTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.sysfs = os.path.join(cls.tmp.name, "sys")
        make_sysfs(cls.sysfs)
        cls.scenario = os.path.join(cls.tmp.name, "gpus.scenario")
        with open(cls.scenario, "w", encoding="utf-8") as f:
            f.write(f"devices {DEVICES}\n")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def env(self, **extra):
        env = dict(os.environ, FAKE_NVML_SCENARIO=self.scenario)
        for k in [k for k in env if k.startswith("FAKE_NVIDIA_SMI_")]:
            del env[k]
        env.update(extra)
        return env

    def check(self, library=None, smi=FAKE_SMI, args=(), **env):
        """Runs the check; (exit status, output, report or None)."""
        report = os.path.join(self.tmp.name, "report.json")
        if os.path.exists(report):
            os.remove(report)
        r = subprocess.run(["bash", CHECK, "--nodewatchd", ARGS.nodewatchd,
                            "--nvml-library", library or ARGS.fake_nvml, "--nvidia-smi", smi,
                            "--sysfs", self.sysfs, "--timeout", "60", "--json", report, *args],
                           env=self.env(**env), capture_output=True, text=True, timeout=300)
        out = r.stdout + r.stderr
        data = None
        if os.path.exists(report):
            with open(report, encoding="utf-8") as f:
                data = json.load(f)
        return r.returncode, out, data

    def assert_all_agree(self, data, out, agreeing):
        pairs = data["pairs"]
        self.assertEqual([p for p in pairs if p["verdict"] == "DISAGREE"], [], out)
        node = {p["quantity"]: p["verdict"] for p in pairs if p["gpu"] == "-"}
        self.assertEqual(node, {"driver_version": "AGREE", "gpus": "AGREE"})
        for i in range(DEVICES):
            mine = [p for p in pairs if p["uuid"] == uuid(i)]
            agreed = {p["quantity"] for p in mine if p["verdict"] == "AGREE"}
            self.assertEqual(agreed, agreeing, f"GPU {i}")
            for p in mine:
                if p["verdict"] == "SKIP":
                    self.assertTrue(p["note"], p)  # a SKIP always says why
        self.assertIn("result: every comparable value agrees", out)

    def test_everything_agrees_with_a_current_driver(self):
        rc, out, data = self.check()
        self.assertEqual(rc, 0, out)
        self.assert_all_agree(data, out, AGREE_V12)
        # The tolerances are stated.
        self.assertIn("±2 C beyond the reads", out)
        self.assertRegex(out, r"AGREE +3 +temperature\.gpu +33 C +33 C +±2 C beyond the reads")

    def test_a_host_link_load_step_that_cannot_run_leaves_the_result(self):
        # PyTorch that cannot be imported (as on a machine without it): the
        # step says it could not run, and the comparison's status stands.
        no_torch = os.path.join(self.tmp.name, "no-torch", "torch")
        os.makedirs(no_torch, exist_ok=True)
        with open(os.path.join(no_torch, "__init__.py"), "w", encoding="utf-8") as f:
            f.write("raise ImportError('no PyTorch here')\n")
        rc, out, _ = self.check(args=("--host-link-load", "1"),
                                PYTHONPATH=os.path.dirname(no_torch))
        self.assertEqual(rc, 0, out)
        self.assertIn("host-link load: cannot run: PyTorch is not installed", out)
        self.assertIn("the host-link load step could not run (exit status 2)", out)
        rc, out, _ = self.check(args=("--host-link-load", "x"))
        self.assertEqual(rc, 2, out)

    def test_everything_agrees_with_an_old_driver(self):
        rc, out, data = self.check(library=ARGS.fake_nvml_old, FAKE_NVIDIA_SMI_FORMAT="old")
        self.assertEqual(rc, 0, out)
        self.assert_all_agree(data, out, AGREE_OLD)
        used = [p for p in data["pairs"] if p["uuid"] == uuid(2) and p["quantity"] == "memory.used"]
        self.assertEqual(used[0]["nodewatch"], "3584 MiB")  # 3 GiB + the reserved 512 MiB

    def test_one_value_off_is_the_one_disagreement(self):
        rc, out, data = self.check(FAKE_NVIDIA_SMI_SHIFT="3:temperature/gpu_temp:+10")
        self.assertEqual(rc, 1, out)
        bad = [p for p in data["pairs"] if p["verdict"] == "DISAGREE"]
        self.assertEqual(len(bad), 1, out)
        self.assertEqual((bad[0]["gpu"], bad[0]["uuid"], bad[0]["quantity"]), ("3", uuid(3), "temperature.gpu"))
        self.assertEqual((bad[0]["nodewatch"], bad[0]["nvidia_smi"]), ("33 C", "43 C"))
        self.assertEqual(sum(1 for p in data["pairs"] if p["verdict"] == "AGREE"),
                         DEVICES * len(AGREE_V12) + 2 - 1)
        self.assertRegex(out, r"DISAGREE +3 +temperature\.gpu +33 C +43 C +±2 C beyond the reads +off by -10 C")
        self.assertIn("1 disagree", out)
        self.assertIn("result: FAILED", out)

    def test_an_answer_nodewatch_does_not_expect_fails(self):
        # The recovery action (field 230), an integer, answered as a double.
        scenario = os.path.join(self.tmp.name, "odd.scenario")
        with open(scenario, "w", encoding="utf-8") as f:
            f.write(f"devices {DEVICES}\nfield_value 0 230 d 1.5\n")
        rc, out, data = self.check(FAKE_NVML_SCENARIO=scenario)
        self.assertEqual(rc, 1, out)
        self.assertEqual(data["summary"]["DISAGREE"], 0, out)
        self.assertEqual(data["nvml_errors"], {"accelerator/nvml_field_type": 1.0}, out)
        self.assertIn("accelerator collector counted 1 nvml_field_type", out)

    def test_a_gpu_nodewatch_does_not_see(self):
        rc, out, data = self.check(FAKE_NVIDIA_SMI_DEVICES=str(DEVICES + 1))
        self.assertEqual(rc, 1, out)
        bad = {(p["uuid"], p["quantity"]) for p in data["pairs"] if p["verdict"] == "DISAGREE"}
        self.assertEqual(bad, {("", "gpus"), (uuid(DEVICES), "present")})

    def test_cannot_run(self):
        for label, smi, env, says in (
                ("no nvidia-smi", os.path.join(self.tmp.name, "none", "nvidia-smi"), {}, "not found"),
                ("no GPU", FAKE_SMI, {"FAKE_NVIDIA_SMI_FAIL": "no_devices"}, "exit status 6"),
                ("no driver", FAKE_SMI, {"FAKE_NVIDIA_SMI_FAIL": "no_driver"}, "exit status 9"),
                ("an empty list", FAKE_SMI, {"FAKE_NVIDIA_SMI_DEVICES": "0"}, "lists no GPU")):
            with self.subTest(label):
                rc, out, data = self.check(smi=smi, **env)
                self.assertEqual(rc, 2, out)
                self.assertIn(says, out)
                self.assertIsNone(data)

    def test_a_nodewatchd_that_does_not_finish(self):
        scenario = os.path.join(self.tmp.name, "hang.scenario")
        with open(scenario, "w", encoding="utf-8") as f:
            f.write(f"devices {DEVICES}\nblock 0 nvmlDeviceGetPowerUsage 30000\n")
        r = subprocess.run(["bash", CHECK, "--nodewatchd", ARGS.nodewatchd, "--nvml-library", ARGS.fake_nvml,
                            "--nvidia-smi", FAKE_SMI, "--sysfs", self.sysfs, "--timeout", "2"],
                           env=self.env(FAKE_NVML_SCENARIO=scenario), capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("nodewatchd --once did not finish within 2 s", r.stderr)

    def test_the_reads_bracket_nodewatch(self):
        """nodewatch read between two nvidia-smi reads: GPU 4's ECC count
        (40) between 39 and 41 agrees, GPU 5's replay counter (105) below
        106 and 107 does not, and GPU 6's temperature (36 C) agrees within
        2 C of 34..37 C."""
        prom = os.path.join(self.tmp.name, "once.prom")
        config = os.path.join(self.tmp.name, "once.toml")
        with open(config, "w", encoding="utf-8") as f:
            f.write(f"[nvml]\nlibrary = '{ARGS.fake_nvml}'\n")
            for c in ("interconnect", "storage", "nic", "textfile"):
                f.write(f"[collectors.{c}]\nenabled = false\n")
        with open(prom, "w", encoding="utf-8") as f:
            subprocess.run([ARGS.nodewatchd, "--config", config, "--once", "--sysfs", self.sysfs,
                            "--log-level", "error"], env=self.env(), stdout=f, check=True, timeout=60)
        reads = []
        for n, shift in enumerate(("4:ecc_errors/volatile/dram_correctable:-1;5:pci/replay_counter:+1;"
                                   "6:temperature/gpu_temp:-2",
                                   "4:ecc_errors/volatile/dram_correctable:+1;5:pci/replay_counter:+2;"
                                   "6:temperature/gpu_temp:+1")):
            path = os.path.join(self.tmp.name, f"read{n}.xml")
            with open(path, "w", encoding="utf-8") as f:
                subprocess.run([sys.executable, FAKE_SMI, "-q", "-x"], stdout=f, check=True,
                               env=self.env(FAKE_NVIDIA_SMI_SHIFT=shift))
            reads += ["--smi", path]
        report = os.path.join(self.tmp.name, "bracket.json")
        r = subprocess.run([sys.executable, COMPARE, "--nodewatch", prom, *reads, "--json", report],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        with open(report, encoding="utf-8") as f:
            pairs = {(p["gpu"], p["quantity"]): p for p in json.load(f)["pairs"]}
        self.assertEqual(pairs[("4", "ecc.volatile.corrected")]["verdict"], "AGREE")
        self.assertEqual(pairs[("4", "ecc.volatile.corrected")]["nvidia_smi"], "39 -> 41")
        self.assertEqual(pairs[("5", "pcie.replay_counter")]["verdict"], "DISAGREE")
        self.assertEqual(pairs[("5", "pcie.replay_counter")]["note"], "off by -1")
        self.assertEqual(pairs[("6", "temperature.gpu")]["verdict"], "AGREE")
        self.assertEqual([k for k, p in pairs.items() if p["verdict"] == "DISAGREE"],
                         [("5", "pcie.replay_counter")])


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodewatchd", required=True)
    ap.add_argument("--fake-nvml", required=True, help="the fake's full libnvidia-ml.so.1")
    ap.add_argument("--fake-nvml-old", required=True, help="the fake's old-driver libnvidia-ml.so.1")
    ARGS, rest = ap.parse_known_args()
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()
