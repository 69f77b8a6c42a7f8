"""When lsd turns llama.cpp's extra buffer types off: the decision logic against fake CPUs,
builds and probes (a probe that says "trapped" is what a VM that traps AMX gives), the cache
of probe results, and the real probe process (a SIGILL child is a trap; the real child
loads its generated model and decodes here)."""

from __future__ import annotations

import json
import signal
import sys

import pytest

from lsd_local.backend import cpu_probe as cp

AMX_CPU = ("processor\t: 0\nmodel name\t: Intel Xeon\n"
           "flags\t\t: fpu avx2 avx512f amx_tile amx_int8\n")
PLAIN_CPU = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2\n"
AMX_BUILD = "0.3.36 CPU : AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | REPACK = 1 |"
PLAIN_BUILD = "0.3.36 CPU : AVX2 = 1 | REPACK = 1 |"


class Probe:
    """A probe that returns `outcome` and counts its calls."""

    def __init__(self, outcome: str) -> None:
        self.outcome = outcome
        self.calls = 0

    def __call__(self) -> cp.ProbeResult:
        self.calls += 1
        return cp.ProbeResult(self.outcome, "fake", 0.5)


@pytest.fixture
def cache(tmp_path):
    return tmp_path / "lsd" / cp.PROBE_FILE


def test_a_trapping_cpu_turns_extra_buffer_types_off_once_and_says_so(cache):
    probe = Probe("trapped")
    first = cp.decide(None, AMX_CPU, AMX_BUILD, cache, probe)
    assert not first.use_extra_bufts and probe.calls == 1
    assert "traps" in first.reason and "fake" in first.notice  # (the probe's detail)
    assert "-mno-amx-int8" in first.notice and "\n" not in first.notice
    again = cp.decide(None, AMX_CPU, AMX_BUILD, cache, probe)  # the cached result
    assert again == first and probe.calls == 1
    saved = json.loads(cache.read_text())["results"]
    assert [entry["outcome"] for entry in saved.values()] == ["trapped"]


def test_a_working_amx_cpu_keeps_them_and_probes_once(cache):
    probe = Probe("ok")
    assert cp.decide(None, AMX_CPU, AMX_BUILD, cache, probe) == cp.RepackDecision(True)
    assert cp.decide(None, AMX_CPU, AMX_BUILD, cache, probe).use_extra_bufts
    assert probe.calls == 1


@pytest.mark.parametrize("cpuinfo,build", [(PLAIN_CPU, AMX_BUILD), (AMX_CPU, PLAIN_BUILD),
                                           ("", AMX_BUILD)])
def test_no_probe_where_amx_cannot_be_reached(cache, cpuinfo, build):
    probe = Probe("trapped")
    assert cp.decide(None, cpuinfo, build, cache, probe).use_extra_bufts
    assert probe.calls == 0 and not cache.exists()


def test_a_probe_that_failed_otherwise_keeps_them(cache):
    assert cp.decide(None, AMX_CPU, AMX_BUILD, cache, Probe("failed")).use_extra_bufts


def test_each_machine_and_build_has_its_own_result(cache):
    probe = Probe("trapped")
    cp.decide(None, AMX_CPU, AMX_BUILD, cache, probe)
    other_build = AMX_BUILD.replace("0.3.36", "0.3.37")
    cp.decide(None, AMX_CPU, other_build, cache, probe)
    assert probe.calls == 2 and len(json.loads(cache.read_text())["results"]) == 2


def test_the_user_can_force_either_way(cache, monkeypatch):
    probe = Probe("trapped")
    forced = cp.decide(True, PLAIN_CPU, PLAIN_BUILD, cache, probe)
    assert not forced.use_extra_bufts and forced.reason == "--no-repack" and not forced.notice
    assert cp.decide(False, AMX_CPU, AMX_BUILD, cache, probe).use_extra_bufts
    monkeypatch.setenv("LSD_NO_REPACK", "1")
    by_env = cp.decide(None, PLAIN_CPU, PLAIN_BUILD, cache, probe)
    assert not by_env.use_extra_bufts and by_env.reason == "LSD_NO_REPACK"
    monkeypatch.setenv("LSD_NO_REPACK", "0")
    assert cp.decide(None, PLAIN_CPU, PLAIN_BUILD, cache, probe).use_extra_bufts
    assert probe.calls == 0


@pytest.mark.parametrize("damage", ["{not json", '{"results": []}', '{"results": {"k": 1}}',
                                    "[]"])
def test_a_damaged_cache_file_means_probing_again(cache, damage):
    cache.parent.mkdir(parents=True)
    cache.write_text(damage)
    probe = Probe("trapped")
    assert not cp.decide(None, AMX_CPU, AMX_BUILD, cache, probe).use_extra_bufts
    assert probe.calls == 1
    assert cp.decide(None, AMX_CPU, AMX_BUILD, cache, probe).reason  # now readable


def test_an_unwritable_cache_dir_still_decides(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    decision = cp.decide(None, AMX_CPU, AMX_BUILD, blocker / "lsd" / cp.PROBE_FILE,
                         Probe("trapped"))
    assert not decision.use_extra_bufts


def test_cpu_flags_reads_x86_and_arm_lines():
    assert "amx_tile" in cp.cpu_flags(AMX_CPU)
    assert cp.cpu_flags("Features\t: fp asimd sve\n") == {"fp", "asimd", "sve"}
    assert cp.reports_amx(AMX_CPU) and not cp.reports_amx(PLAIN_CPU)


@pytest.mark.parametrize("sig", [signal.SIGILL, signal.SIGSEGV])
def test_a_child_killed_by_sigill_or_sigsegv_is_a_trap_and_other_endings_are_not(sig,
                                                                                tmp_path):
    """SIGSEGV too: one of our VMs faults AMX's `ldtilecfg` with a general protection
    fault, and the probe read it as "failed", leaving extra buffer types on: lsd then died
    on the Qwen pair's first batched decode."""
    trap = cp.run_probe([sys.executable, "-c",
                         f"import os; os.kill(os.getpid(), {int(sig)})"])
    assert trap.outcome == "trapped" and trap.detail == f"killed by {sig.name}"
    decision = cp.decide(None, AMX_CPU, AMX_BUILD, tmp_path / "p.json", lambda: trap)
    assert not decision.use_extra_bufts and sig.name in decision.notice
    assert cp.run_probe([sys.executable, "-c", "raise SystemExit(3)"]).outcome == "failed"
    assert cp.run_probe(["/nonexistent/probe"]).outcome == "failed"


def test_the_real_probe_child_loads_its_model_and_decodes_a_batch():
    """The generated Q8_0 model is one llama.cpp loads with extra buffer types on; on a CPU
    without a trap the child ends normally (where AMX is reported it may trap)."""
    from lsd_local.backend import build_identity

    result = cp.run_probe()
    may_trap = cp.reports_amx(cp.read_cpuinfo()) and cp.build_uses_amx(build_identity())
    if result.outcome == "trapped" and may_trap:
        return
    assert result.outcome == "ok", result.detail
    assert "decoded 32 tokens; logits finite: True" in result.detail


@pytest.mark.parametrize("control_exit", [0, -int(signal.SIGSEGV)])
def test_the_probe_s_sigsegv_is_a_trap_only_if_its_control_ends_well(monkeypatch,
                                                                     control_exit):
    """The probe child killed by SIGSEGV, then the same child without extra buffer types:
    ending well, it was them (a trap); crashing too, it was something else ("failed", which
    leaves them on: nothing here says they are to blame)."""
    kill = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"
    control = "raise SystemExit(0)" if control_exit == 0 else kill
    monkeypatch.setattr(cp, "child_command", lambda no_repack: [
        sys.executable, "-c", control if no_repack else kill])
    result = cp.run_probe()
    assert result.outcome == ("trapped" if control_exit == 0 else "failed"), result.detail
    assert result.detail.startswith("killed by SIGSEGV")


@pytest.mark.parametrize("on", [True, False])
def test_the_peer_llama_loads_with_extra_buffer_types_as_lsd_does(monkeypatch, on):
    """llama-cpp-python's Llama (lsd bench's peer column) takes no -nr: where lsd loads
    without extra buffer types, the parameters it starts from have them off while it loads
    (on a CPU that traps AMX the peer died on its first batch), and nothing after."""
    import llama_cpp

    from lsd_local.bench import peer

    monkeypatch.setattr(cp, "repack_decision",
                        lambda *_: cp.RepackDecision(on, "" if on else "traps"))
    with peer._extra_bufts_as_lsd():
        assert llama_cpp.llama_cpp.llama_model_default_params().use_extra_bufts is on
    assert llama_cpp.llama_cpp.llama_model_default_params().use_extra_bufts is True
