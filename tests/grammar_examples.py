"""Texts each shipped grammar must accept (complete) and must not: shared by the llama.cpp
tests (tiny/test_grammar_tiny.py) and the GBNF reader's (unit/test_gbnf.py), so that the
reader is checked against the same texts llama.cpp is."""

from __future__ import annotations

import json

EXAMPLES = {
    "json": ([json.dumps({"a": [1, 2.5, -3e4, None, True], "b": {"c": "é\n\"x\""}}),
              json.dumps([{"k": []}, "s"], indent=2), "0", '"\\u00e9"', "null", " [ ] "],
             ["{'a': 1}", "[1,]", '{"a" 1}', "01", '"a\nb"', "tru", "[1] 2"]),
    "json_object": (['{"a": [1, {"b": null}]}', "{}", json.dumps({"x": {"y": [True]}},
                                                                  indent=4)],
                    ["[1]", '"x"', "{", '{"a": 1,}']),
    "json_string_array": (['["a", "b\\n"]', "[]", json.dumps(["x", "ü"], indent=1)],
                          ["[1]", '["a",]', '{"a": "b"}', '["a" "b"]']),
    "list": (["- apples\n- pears\n", "1. one\n2. two\n", "* x\n"],
             ["apples\n", "- \n", "- a", "intro\n- a\n"]),
    "arithmetic": (["(3 + 4) * -2.5 = -17.5", "2^10", "1+2*3", "((1))", "7 / 2 = 3.5"],
                   ["3 +", "()", "1 = = 2", "1  + 2", "a + 1"]),
    "python_function": (["def add(a: int, b: int = 0) -> int:\n    return a + b\n",
                         "def f(*args, **kw):\n    x = 1\n\n    return x\n",
                         "def g(x: list[int] | None = None) -> dict[str, int]:\n    pass\n"],
                        ["def f():\nreturn 1\n", "class A:\n    pass\n", "def f()\n    pass\n"]),
}
