#!/usr/bin/env python3
"""`kvtier size` as a user runs it: outputs, exit codes and error messages.

Usage: size_cli_test.py KVTIER_BINARY FIXTURES_DIR
"""
import json
import pathlib
import subprocess
import sys
import tempfile
import unittest

BINARY = ""
FIXTURES = pathlib.Path()


def kvtier(*args):
    run = subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=60)
    if run.returncode < 0:
        raise AssertionError(f"kvtier {' '.join(args)} crashed with signal {-run.returncode}: {run.stderr}")
    return run


class SizeCli(unittest.TestCase):
    def test_list_names_every_catalog_model(self):
        run = kvtier("size", "--list")
        self.assertEqual(run.returncode, 0)
        names = [line.split("\t")[0] for line in run.stdout.splitlines()]
        self.assertEqual(len(names), 18)
        self.assertIn("deepseek-v3", names)

    def test_all_prints_one_row_per_model(self):
        run = kvtier("size", "--all")
        self.assertEqual(run.returncode, 0, run.stderr)
        for name in ("deepseek-v3", "llama-3-70b", "qwen3-next-80b-a3b-thinking", "gpt-oss-20b"):
            self.assertIn(name, run.stdout)
        data = json.loads(kvtier("size", "--all", "--json").stdout)
        self.assertEqual(len(data), 18)

    def test_json_has_the_documented_fields(self):
        data = json.loads(kvtier("size", "deepseek-v3", "--json").stdout)
        for field in ("model", "layers", "attention", "kv_bytes_per_token", "kv_bytes_per_token_per_layer",
                      "naive_mha_bytes_per_token_per_layer", "overprovision_ratio", "state_bytes_per_sequence",
                      "kv_bytes_per_block"):
            self.assertIn(field, data)
        self.assertEqual(data["kv_bytes_per_token_per_layer"], 1152)
        self.assertEqual(data["naive_mha_bytes_per_token_per_layer"], 65536)
        self.assertEqual(data["attention"]["full_attention"]["kind"], "MLA")
        self.assertNotIn("max_batch", data)

    def test_gpu_plan_and_tiers(self):
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write("tiers:\n  - name: gpu_hbm\n    capacity: 80GiB\n  - name: cpu_dram\n    capacity: 1TiB\n")
        data = json.loads(kvtier("size", "llama-3-70b", "--tp", "4", "--gpu-mem-gib", "80", "--context", "8192",
                                 "--tiers", f.name, "--json").stdout)
        self.assertGreater(data["max_batch"], 0)
        self.assertGreater(data["max_tokens"], data["max_batch"] * 8192 - 1)
        self.assertEqual(data["limited_by"], "kv_cache")
        self.assertEqual([t["name"] for t in data["tiers"]], ["gpu_hbm", "cpu_dram"])
        self.assertEqual(data["tiers"][1]["tokens"], 2**40 // (2 * 2 * 128 * 2 * 80 * 4))
        table = kvtier("size", "llama-3-70b", "--tp", "4", "--gpu-mem-gib", "80", "--context", "8192").stdout
        self.assertIn("max batch", table)

    def test_config_path_and_fixture_variety(self):
        for fixture in ("jamba.json", "nemotron_h_small.json", "mamba2.json", "multimodal_wrapper.json",
                        "nonfinite_literals.json", "legacy_n_head_kv.json", "mha_no_kv_heads.json"):
            run = kvtier("size", "--config", str(FIXTURES / "configs" / fixture), "--json")
            self.assertEqual(run.returncode, 0, f"{fixture}: {run.stderr}")
            json.loads(run.stdout)

    def test_bad_configs_fail_with_the_path_in_the_message(self):
        for path in sorted((FIXTURES / "bad_configs").iterdir()):
            run = kvtier("size", "--config", str(path))
            self.assertEqual(run.returncode, 1, f"{path.name}: rc={run.returncode}")
            self.assertIn(str(path), run.stderr, path.name)
            self.assertEqual(run.stdout, "", path.name)

    def test_usage_errors(self):
        self.assertEqual(kvtier("size").returncode, 1)
        unknown = kvtier("size", "gpt-9")
        self.assertEqual(unknown.returncode, 1)
        self.assertIn("not in the catalog", unknown.stderr)
        self.assertEqual(kvtier("size", "llama-3-8b", "--tp", "three").returncode, 2)
        self.assertEqual(kvtier("size", "llama-3-8b", "--kv-dtype", "fp5").returncode, 1)
        self.assertEqual(kvtier("size", "llama-3-8b", "--block-size", "0").returncode, 1)
        self.assertEqual(kvtier("size", "llama-3-8b", "--gpu-mem-gib", "80").returncode, 1)
        for flag, value in (("--gpu-mem-gib", "-80"), ("--context", "-5"), ("--tp", "0"), ("--pp", "-1"),
                            ("--gpu-util", "1.5"), ("--max-batched-tokens", "0"), ("--tp", "1000000")):
            args = ["size", "llama-3-8b", flag, value]
            if flag == "--gpu-util":
                args += ["--gpu-mem-gib", "80", "--context", "1024"]
            run = kvtier(*args)
            self.assertEqual(run.returncode, 1, f"{flag} {value}: rc={run.returncode} {run.stderr}")
            self.assertIn("error:", run.stderr)
        self.assertEqual(kvtier("size", "llama-3-8b", "--tiers", "/no/such.yaml").returncode, 1)
        self.assertEqual(kvtier("size", "--config", "/no/such/config.json").returncode, 1)

    def test_info_runs_without_a_gpu(self):
        run = kvtier("info")
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertIn("gpus:", run.stdout)


if __name__ == "__main__":
    BINARY, FIXTURES = sys.argv[1], pathlib.Path(sys.argv[2])
    result = unittest.main(argv=sys.argv[:1], exit=False, verbosity=1).result
    sys.exit(0 if result.wasSuccessful() and result.testsRun > 0 else 1)
