"""Tiny random-weight llama-architecture GGUF files that real llama.cpp loads in milliseconds.

The vocabulary is SentencePiece-style (llama.cpp's "llama" tokenizer): <unk>, <s>, </s>, the 256
byte tokens and a few word pieces, so text with multi-byte characters is spelled with byte
tokens and a character can span several tokens. A draft is the target's weights plus noise, so
drafts agree with the target often but not always.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

WORDS = ["▁", "▁the", "▁a", "▁of", "▁and", "▁to", "▁in", "▁is", "▁it", "▁that", "e", "t", "a",
         "o", "n", "s", "▁def", "▁return", "(", ")"]
OTHER_WORDS = ["▁x", "▁y", "▁z", "▁foo", "▁bar", "▁baz", "▁qux", "▁if", "▁else", "▁for",
               "i", "u", "r", "l", "m", "p", "▁class", "▁pass", "[", "]", "▁while", "▁not"]
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


@dataclass(frozen=True)
class TinySpec:
    """Shape and randomness of one tiny model."""

    seed: int = 0
    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_ff: int = 128
    n_ctx_train: int = 4096
    logit_scale: float = 0.45  # std of the output matrix: peakier distributions when larger
    words: tuple[str, ...] = tuple(WORDS)
    eos_logit_zero: bool = True  # zero row for </s> so that generations rarely stop early


def vocab(words: tuple[str, ...]) -> tuple[list[str], list[float], list[int]]:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + list(words)
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256 + [
        gguf.TokenType.CONTROL if w in CONTROL_WORDS else
        gguf.TokenType.USER_DEFINED if w in AGENT_WORDS or w in HARMONY_WORDS or
        w in DSML_WORDS or w in MINIMAX3_TAGS or w in KIMI3_TAGS else
        gguf.TokenType.NORMAL
        for w in words]  # markers are matched whole, as Qwen's <tool_call> is
    scores = [0.0] * 259 + [-float(i) for i in range(len(words))]
    return tokens, scores, [int(t) for t in types]


def random_weights(spec: TinySpec, n_vocab: int) -> dict[str, np.ndarray]:
    """numpy arrays in GGUF layout (rows = output features)."""
    rng = np.random.default_rng(spec.seed)
    d, ff = spec.n_embd, spec.n_ff

    def mat(rows: int, cols: int, std: float) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * std).astype(np.float32)

    w = {"token_embd.weight": mat(n_vocab, d, 1.0),
         "output_norm.weight": np.ones(d, np.float32),
         "output.weight": mat(n_vocab, d, spec.logit_scale)}
    if spec.eos_logit_zero:
        w["output.weight"][2] = 0.0
    for i in range(spec.n_layer):
        p = f"blk.{i}."
        w[p + "attn_norm.weight"] = np.ones(d, np.float32)
        w[p + "ffn_norm.weight"] = np.ones(d, np.float32)
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w[p + name + ".weight"] = mat(d, d, 0.5 / np.sqrt(d))
        w[p + "ffn_gate.weight"] = mat(ff, d, 1.0 / np.sqrt(d))
        w[p + "ffn_up.weight"] = mat(ff, d, 1.0 / np.sqrt(d))
        w[p + "ffn_down.weight"] = mat(d, ff, 1.0 / np.sqrt(ff))
    return w


def perturbed(weights: dict[str, np.ndarray], noise: float, seed: int) -> dict[str, np.ndarray]:
    """A copy with relative Gaussian noise on every matrix (the draft of a target)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, w in weights.items():
        if w.ndim == 2:
            w = w + (rng.standard_normal(w.shape) * noise * w.std()).astype(np.float32)
        out[name] = w
    return out


def add_f32_spm_vocab(writer, tokens: list[str], scores: list[float], types: list[int]) -> None:
    """What every tiny model shares: float32 weights, the SentencePiece-style vocabulary and
    its <unk> <s> </s> ids."""
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)


def write_gguf(path: Path, spec: TinySpec, weights: dict[str, np.ndarray],
               chat_template: str | list[dict] | None = CHAT_TEMPLATE) -> Path:
    """The tiny model's GGUF. `chat_template`: Jinja text, or named templates as
    transformers keeps them ([{"name": "default", "template": ...}, ...]), which the writer
    stores as tokenizer.chat_template and tokenizer.chat_template.NAME, as llama.cpp's
    converter does."""
    tokens, scores, types = vocab(spec.words)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(path.stem)
    writer.add_context_length(spec.n_ctx_train)
    writer.add_embedding_length(spec.n_embd)
    writer.add_block_count(spec.n_layer)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head)
    writer.add_rope_dimension_count(spec.n_embd // spec.n_head)
    add_f32_spm_vocab(writer, tokens, scores, types)
    writer.add_add_bos_token(True)
    if chat_template:
        writer.add_chat_template(chat_template)
    for name, w in weights.items():
        writer.add_tensor(name, w)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def make_pair(directory: Path, noise: float = 0.1,
              spec: TinySpec | None = None) -> tuple[Path, Path]:
    """Write target.gguf and draft.gguf (a perturbed copy) into `directory`."""
    spec = spec or TinySpec()
    n_vocab = 259 + len(spec.words)
    weights = random_weights(spec, n_vocab)
    target = write_gguf(directory / "target.gguf", spec, weights)
    draft = write_gguf(directory / "draft.gguf", spec, perturbed(weights, noise, spec.seed + 1))
    return target, draft


TINY_CTX = 1024  # the context the tests load the tiny models with


def load_tiny(pair: tuple[Path, Path], drafter: str, draft: Path | None = None, **kw):
    """An Engine over the tiny target with the tests' defaults: the pair's draft when the
    drafter needs one (or `draft`), p_min 0 (the draft model drafts every token), TINY_CTX."""
    from lsd_local import Engine

    if draft is None and drafter in ("model", "multilevel"):
        draft = pair[1]
    kw.setdefault("p_min", 0.0)
    kw.setdefault("n_ctx", TINY_CTX)
    return Engine.load(pair[0], draft, drafter=drafter, **kw)


def make_nan_model(directory: Path) -> Path:
    """make_pair's target with one NaN in its output matrix: llama.cpp loads it and returns a
    NaN logit for that token in every row (what a broken file or backend looks like)."""
    spec = TinySpec()
    weights = random_weights(spec, 259 + len(spec.words))
    weights["output.weight"][261, 5] = np.nan
    return write_gguf(directory / "nan-logits.gguf", spec, weights)


def make_other_vocab(directory: Path) -> Path:
    """A model whose vocabulary differs from make_pair's (other word pieces, other size)."""
    spec = TinySpec(seed=7, words=tuple(OTHER_WORDS))
    weights = random_weights(spec, 259 + len(OTHER_WORDS))
    return write_gguf(directory / "other-vocab.gguf", spec, weights)


def make_mamba(directory: Path, seed: int = 3) -> Path:
    """A tiny Mamba (recurrent) model: its cache cannot drop a partial range of positions."""
    n_embd, d_inner, d_conv, d_state, dt_rank, n_layer = 32, 64, 4, 8, 4, 2
    tokens, scores, types = vocab(tuple(WORDS))
    rng = np.random.default_rng(seed)

    def mat(*shape: int, std: float = 0.2) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    path = directory / "mamba.gguf"
    writer = gguf.GGUFWriter(str(path), "mamba")
    writer.add_context_length(4096)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(0)
    writer.add_head_count(0)
    writer.add_ssm_conv_kernel(d_conv)
    writer.add_ssm_inner_size(d_inner)
    writer.add_ssm_state_size(d_state)
    writer.add_ssm_time_step_rank(dt_rank)
    add_f32_spm_vocab(writer, tokens, scores, types)
    n_vocab = len(tokens)
    writer.add_tensor("token_embd.weight", mat(n_vocab, n_embd, std=1.0))
    writer.add_tensor("output_norm.weight", np.ones(n_embd, np.float32))
    writer.add_tensor("output.weight", mat(n_vocab, n_embd, std=0.5))
    for i in range(n_layer):
        p = f"blk.{i}."
        writer.add_tensor(p + "attn_norm.weight", np.ones(n_embd, np.float32))
        writer.add_tensor(p + "ssm_in.weight", mat(2 * d_inner, n_embd))
        writer.add_tensor(p + "ssm_conv1d.weight", mat(d_inner, d_conv))
        writer.add_tensor(p + "ssm_conv1d.bias", np.zeros(d_inner, np.float32))
        writer.add_tensor(p + "ssm_x.weight", mat(dt_rank + 2 * d_state, d_inner))
        writer.add_tensor(p + "ssm_dt.weight", mat(d_inner, dt_rank))
        writer.add_tensor(p + "ssm_dt.bias", np.zeros(d_inner, np.float32))
        writer.add_tensor(p + "ssm_a", -np.abs(mat(d_inner, d_state, std=1.0)) - 0.1)
        writer.add_tensor(p + "ssm_d", np.ones(d_inner, np.float32))
        writer.add_tensor(p + "ssm_out.weight", mat(n_embd, d_inner))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# A Hermes/Qwen-style template (tools in the system message, <tool_call> blocks, tool turns
# as <tool_response>) and Qwen3's enable_thinking, over ChatML: what agents' templates do.
AGENT_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n' }}{%- endif %}"
    "{{- '# Tools\\n<tools>' }}{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}"
    "{%- endfor %}{{- '\\n</tools>\\nCall one with <tool_call>{\\\"name\\\": ..., "
    "\\\"arguments\\\": ...}</tool_call><|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' %}{{- '<|im_start|>assistant\\n' + (m.content or '') }}"
    "{%- for call in m.tool_calls or [] %}{{- '\\n<tool_call>\\n{\\\"name\\\": \\\"' + "
    "call.function.name + '\\\", \\\"arguments\\\": ' + (call.function.arguments | tojson) "
    "+ '}\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' %}{{- '<|im_start|>user\\n<tool_response>\\n' + m.content + "
    "'\\n</tool_response><|im_end|>\\n' }}"
    "{%- elif m.role != 'system' %}"
    "{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and not enable_thinking %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}")
# the rest of a ChatML template after an assistant turn: tool results, other turns, the
# generation prompt (shared by the tool-call templates below)
_CHATML_TOOL_TURN_AND_END = (
    "{%- elif m.role == 'tool' %}{{- '<|im_start|>user\\n<tool_response>\\n' + m.content + "
    "'\\n</tool_response><|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
# The same conversation with Qwen3-Coder's way of calling tools (XML: a function and its
# parameters as tags), written here for the tests
XML_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n# Tools\\n<tools>' }}{%- for tool in tools %}"
    "{{- '\\n<function>\\n<name>' + tool.function.name + '</name>' }}"
    "{%- for key, p in (tool.function.parameters.properties or {}).items() %}"
    "{{- '\\n<parameter>\\n<name>' + key + '</name>\\n<type>' + (p.type or 'any') + "
    "'</type>\\n</parameter>' }}{%- endfor %}{{- '\\n</function>' }}{%- endfor %}"
    "{{- '\\n</tools>\\nCall one with <tool_call>\\n<function=NAME>\\n<parameter=P>\\nvalue"
    "\\n</parameter>\\n</function>\\n</tool_call><|im_end|>\\n' }}{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' %}{{- '<|im_start|>assistant\\n' + (m.content or '') }}"
    "{%- for call in m.tool_calls or [] %}"
    "{{- '\\n<tool_call>\\n<function=' + call.function.name + '>\\n' }}"
    "{%- for key, value in call.function.arguments.items() %}"
    "{{- '<parameter=' + key + '>\\n' + (value if value is string else value | tojson) + "
    "'\\n</parameter>\\n' }}{%- endfor %}{{- '</function>\\n</tool_call>' }}{%- endfor %}"
    "{{- '<|im_end|>\\n' }}" + _CHATML_TOOL_TURN_AND_END)
# GLM-4.5's way: the name after the opener, then a key tag and a value tag per argument
# (strings raw, other types as JSON); written here for the tests
GLM_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n# Tools\\n' }}{%- for tool in tools %}"
    "{{- (tool | tojson) + '\\n' }}{%- endfor %}"
    "{{- 'Call one with <tool_call>NAME\\n<arg_key>P</arg_key>\\n<arg_value>value"
    "</arg_value>\\n</tool_call><|im_end|>\\n' }}{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' %}{{- '<|im_start|>assistant\\n' + (m.content or '') }}"
    "{%- for call in m.tool_calls or [] %}"
    "{{- '\\n<tool_call>' + call.function.name + '\\n' }}"
    "{%- for key, value in call.function.arguments.items() %}"
    "{{- '<arg_key>' + key + '</arg_key>\\n<arg_value>' + (value if value is string else "
    "value | tojson) + '</arg_value>\\n' }}{%- endfor %}{{- '</tool_call>' }}{%- endfor %}"
    "{{- '<|im_end|>\\n' }}" + _CHATML_TOOL_TURN_AND_END)
# Mistral's way (v0.3, Nemo): the tools before the last user turn, calls as one JSON list
# after [TOOL_CALLS], each with its id, which must be 9 letters and digits (the template
# refuses others), results with the call's id; written here for the tests
MISTRAL_TEMPLATE = (
    "{%- for m in messages %}{%- if m.role == 'user' %}"
    "{%- if tools and loop.last %}{{- '[AVAILABLE_TOOLS]' + tools | tojson + "
    "'[/AVAILABLE_TOOLS]' }}{%- endif %}{{- '[INST]' + m.content + '[/INST]' }}"
    "{%- elif m.role == 'assistant' and m.tool_calls %}{{- '[TOOL_CALLS][' }}"
    "{%- for call in m.tool_calls %}{%- if call.id is not string or call.id|length != 9 %}"
    "{{- raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}"
    "{%- endif %}{{- '{\"name\": \"' + call.function.name + '\", \"arguments\": ' + "
    "call.function.arguments | tojson + ', \"id\": \"' + call.id + '\"}' }}"
    "{%- if not loop.last %}{{- ', ' }}{%- endif %}{%- endfor %}{{- ']</s>' }}"
    "{%- elif m.role == 'tool' %}{{- '[TOOL_RESULTS]{\"content\": ' + m.content | tojson + "
    "', \"call_id\": \"' + m.tool_call_id + '\"}[/TOOL_RESULTS]' }}"
    "{%- else %}{{- m.content + '</s>' }}{%- endif %}{%- endfor %}")
# Mistral's newer way (tokenizer v13: Devstral, Ministral 3): each call its own block, the
# name before [ARGS] and its arguments' JSON after; results without ids. With v11 (Mistral
# Small 3.2) an id of 9 letters and digits goes between them; written here for the tests
MINISTRAL_TEMPLATE = (
    "{%- for m in messages %}{%- if m.role == 'user' %}"
    "{%- if tools and loop.last %}{{- '[AVAILABLE_TOOLS]' + tools | tojson + "
    "'[/AVAILABLE_TOOLS]' }}{%- endif %}{{- '[INST]' + m.content + '[/INST]' }}"
    "{%- elif m.role == 'assistant' %}{{- m.content or '' }}"
    "{%- for call in m.tool_calls or [] %}{{- '[TOOL_CALLS]' + call.function.name + "
    "'[ARGS]' + call.function.arguments | tojson }}{%- endfor %}{{- '</s>' }}"
    "{%- elif m.role == 'tool' %}{{- '[TOOL_RESULTS]' + m.content + '[/TOOL_RESULTS]' }}"
    "{%- endif %}{%- endfor %}")
MISTRAL_IDS_TEMPLATE = MINISTRAL_TEMPLATE.replace(
    "'[ARGS]' + call.function.arguments",
    "'[CALL_ID]' + call.id + '[ARGS]' + call.function.arguments").replace(
    "{%- for call in m.tool_calls or [] %}",
    "{%- for call in m.tool_calls or [] %}{%- if call.id|length != 9 %}"
    "{{- raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}"
    "{%- endif %}").replace(
    "'[TOOL_RESULTS]' + m.content", "'[TOOL_RESULTS]' + m.tool_call_id + '[TOOL_CONTENT]' + "
    "m.content")
# Nemotron Nano v2's way: the calls as one JSON list between <TOOLCALL> and </TOOLCALL>;
# Granite 3's: one JSON list after <|tool_call|>; written here for the tests
NEMOTRON_TEMPLATE = (
    "{%- if tools %}{{- 'System\n<AVAILABLE_TOOLS>' + tools | tojson + '</AVAILABLE_TOOLS>\n"
    "Call them as <TOOLCALL>[{\"name\": ..., \"arguments\": ...}]</TOOLCALL>\n' }}{%- endif %}"
    "{%- for m in messages %}{%- if m.role == 'assistant' %}"
    "{{- 'Assistant\n' + (m.content or '') }}{%- if m.tool_calls %}{{- '<TOOLCALL>[' }}"
    "{%- for call in m.tool_calls %}{{- '{\"name\": \"' + call.function.name + "
    "'\", \"arguments\": ' + call.function.arguments | tojson + '}' }}"
    "{%- if not loop.last %}{{- ', ' }}{%- endif %}{%- endfor %}{{- ']</TOOLCALL>' }}"
    "{%- endif %}{{- '\n' }}"
    "{%- elif m.role == 'tool' %}{{- 'User\n<TOOL_RESPONSE>[' + m.content + "
    "']</TOOL_RESPONSE>\n' }}{%- else %}{{- 'User\n' + m.content + '\n' }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- 'Assistant\n' }}{%- endif %}")
GRANITE_TEMPLATE = (
    "{%- if tools %}{{- '<|start_of_role|>available_tools<|end_of_role|>' + tools | tojson + "
    "'<|end_of_text|>\n' }}{%- endif %}"
    "{%- for m in messages %}{%- if m.role == 'assistant' and m.tool_calls %}"
    "{{- '<|start_of_role|>assistant<|end_of_role|><|tool_call|>' + "
    "m.tool_calls | map(attribute='function') | list | tojson + '<|end_of_text|>\n' }}"
    "{%- elif m.role == 'tool' %}{{- '<|start_of_role|>tool_response<|end_of_role|>' + "
    "m.content + '<|end_of_text|>\n' }}{%- else %}{{- '<|start_of_role|>' + m.role + "
    "'<|end_of_role|>' + m.content + '<|end_of_text|>\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_of_role|>assistant<|end_of_role|>' }}"
    "{%- endif %}")
# Apriel 1.6's way: one JSON list of calls in <tool_calls> tags (its reasoning prompt left
# out: a random model would not end it); written here for the tests
APRIEL_TEMPLATE = (
    "{%- if tools %}{{- '<|begin_system|>\\nReturn calls as <tool_calls>[{\"name\": ..., "
    "\"arguments\": ...}]</tool_calls>\\n' + tools | tojson + '\\n' }}{%- endif %}"
    "{%- for m in messages %}{%- if m.role == 'assistant' %}"
    "{{- '<|begin_assistant|>\\n' + (m.content or '') }}{%- if m.tool_calls %}"
    "{{- '\\n<tool_calls>[' }}{%- for c in m.tool_calls %}{{- '{\"name\": \"' + "
    "c.function.name + '\", \"arguments\": ' + c.function.arguments | tojson + '}' }}"
    "{%- if not loop.last %}{{- ', ' }}{%- endif %}{%- endfor %}{{- ']</tool_calls>' }}"
    "{%- endif %}{{- '\\n<|end|>\\n' }}"
    "{%- elif m.role == 'tool' %}{{- '<|begin_tool_result|>\\n' + m.content + '\\n' }}"
    "{%- else %}{{- '<|begin_' + m.role + '|>\\n' + m.content + '\\n' }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|begin_assistant|>\\n' }}{%- endif %}")
# FireFunction v2's way: " functools[" and one JSON list of calls, no closer; the tools come
# as `functions` (their JSON text) and the date as `datetime`; written here for the tests
FIREFUNCTION_TEMPLATE = (
    "{{- 'system: call as functools[{\"name\": ..., \"arguments\": ...}]\n' + functions + "
    "'\nDate: ' + datetime + '\n' }}"
    "{%- for m in messages %}{%- if m.role == 'assistant' %}"
    "{{- 'assistant: ' + (m.content or '') }}{%- if m.tool_calls %}{{- ' functools[' }}"
    "{%- for c in m.tool_calls %}{{- '{\"name\": \"' + c.function.name + "
    "'\", \"arguments\": ' + c.function.arguments | tojson + '}' }}"
    "{%- if not loop.last %}{{- ', ' }}{%- endif %}{%- endfor %}{{- ']' }}{%- endif %}"
    "{{- '\n' }}{%- else %}{{- m.role + ': ' + m.content + '\n' }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- 'assistant:' }}{%- endif %}")
# Apertus's way: a JSON list of calls, each named by its key, between markers; tool results
# on the assistant's turn; written here for the tests
APERTUS_TEMPLATE = (
    "{%- if tools %}{{- 'tools: ' + tools | tojson + '\n' }}{%- endif %}"
    "{%- for m in messages %}{%- if m.role == 'assistant' %}"
    "{{- '<|assistant_start|>' + (m.content or '') }}{%- if m.tool_calls %}"
    "{{- '<|tools_prefix|>[' }}{%- for c in m.tool_calls %}{{- '{\"' + c.function.name + "
    "'\": ' + c.function.arguments | tojson + '}' }}{%- if not loop.last %}{{- ', ' }}"
    "{%- endif %}{%- endfor %}{{- ']<|tools_suffix|>' }}{%- endif %}"
    "{%- elif m.role == 'tool' %}{{- '[' + m.content + ']' }}"
    "{%- else %}{{- '<|' + m.role + '_start|>' + m.content + '<|' + m.role + '_end|>' }}"
    "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|assistant_start|>' }}"
    "{%- endif %}")
# MiniMax-M1's way: <tool_calls>, one JSON object per line, </tool_calls>; written here for
# the tests
MINIMAX1_TEMPLATE = (
    "{%- if tools %}{{- 'system: calls go in <tool_calls></tool_calls>, one per line:\n' + "
    "tools | tojson + '\n' }}{%- endif %}"
    "{%- for m in messages %}{%- if m.role == 'assistant' and m.tool_calls %}"
    "{{- 'assistant:\n<tool_calls>\n' }}{%- for c in m.tool_calls %}"
    "{{- '{\"name\": \"' + c.function.name + '\", \"arguments\": ' + "
    "c.function.arguments | tojson + '}\n' }}{%- endfor %}{{- '</tool_calls>\n' }}"
    "{%- elif m.role == 'tool' %}{{- 'tool result: ' + m.content + '\n' }}"
    "{%- else %}{{- m.role + ':\n' + (m.content or '') + '\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- 'assistant:\n' }}{%- endif %}")
# Tencent Hy3's way: GLM's key and value tags marked ":opensource", the name ended by a
# separator, the calls in a block; the tags built with format(), as its template does; the
# generation prompt closes an empty reasoning block unless reasoning_effort asks for one;
# written here for the tests
HY3_TEMPLATE = (
    "{%- set HYTK = ':opensource' %}{%- set ak = '<arg_key{}>'.format(HYTK) %}"
    "{%- set av = '<arg_value{}>'.format(HYTK) %}"
    "{%- if tools %}{{- 'tools: ' + tools | tojson + '\n' }}{%- endif %}"
    "{%- for m in messages %}{%- if m.role == 'user' %}"
    "{{- '<｜hy_User{}｜>'.format(HYTK) + m.content }}"
    "{%- elif m.role == 'assistant' %}{{- '<｜hy_Assistant{}｜>'.format(HYTK) + "
    "(m.content or '') }}{%- if m.tool_calls %}{{- '<tool_calls{}>\n'.format(HYTK) }}"
    "{%- for c in m.tool_calls %}{{- '<tool_call{}>'.format(HYTK) + c.function.name + "
    "'<tool_sep{}>\n'.format(HYTK) }}{%- for k, v in c.function.arguments.items() %}"
    "{{- ak + k + '</arg_key{}>\n'.format(HYTK) + av + (v if v is string else v | tojson) "
    "+ '</arg_value{}>\n'.format(HYTK) }}{%- endfor %}"
    "{{- '</tool_call{}>\n'.format(HYTK) }}{%- endfor %}"
    "{{- '</tool_calls{}>'.format(HYTK) }}{%- endif %}"
    "{%- elif m.role == 'tool' %}{{- 'result: ' + m.content + '\n' }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<｜hy_Assistant{}｜>'.format(HYTK) }}"
    "{%- if reasoning_effort in ['low', 'high'] %}{{- '<think{}>'.format(HYTK) }}"
    "{%- else %}{{- '<think{0}></think{0}>'.format(HYTK) }}{%- endif %}{%- endif %}")
# Functionary v3.2's way: the generation prompt ends with ">>>", each message names its
# recipient on its first line ("all": the answer), a call's arguments as JSON text after its
# function's name; written here for the tests
FUNCTIONARY_TEMPLATE = (
    "{%- if tools %}{{- 'system\nRespond in this format:\n>>>${recipient}\n${content}\n' + "
    "(tools | tojson) + '<|eot|>' }}{%- endif %}"
    "{%- for m in messages %}{{- m.role + '\n' }}{%- if m.role == 'assistant' %}"
    "{%- if m.content %}{{- '>>>all\n' + m.content }}{%- endif %}"
    "{%- for c in m.tool_calls or [] %}{{- '>>>' + c.function.name + '\n' + "
    "c.function.arguments }}{%- endfor %}{%- else %}{{- m.content }}{%- endif %}"
    "{{- '<|eot|>' }}{%- endfor %}{%- if add_generation_prompt %}{{- 'assistant\n>>>' }}"
    "{%- endif %}")
# GigaChat 3's way: one call as a message of its own after the answer's ("function call"),
# every message ending with a separator; written here for the tests
GIGACHAT_TEMPLATE = (
    "{%- set sep, role = '<|message_sep|>\\n\\n', '<|role_sep|>\\n' %}"
    "{%- if tools %}{{- 'function descriptions' + role + (tools | tojson) + sep }}{%- endif %}"
    "{%- for m in messages %}{%- if m.role == 'assistant' %}"
    "{{- 'assistant' + role + (m.content or '') + sep }}{%- if m.tool_calls %}"
    "{{- 'function call' + role + '{\"name\": \"' + m.tool_calls[0].function.name + "
    "'\", \"arguments\": ' + m.tool_calls[0].function.arguments | tojson + '}' + sep }}"
    "{%- endif %}{%- elif m.role == 'tool' %}{{- 'function result' + role + m.content + sep }}"
    "{%- else %}{{- m.role + role + m.content + sep }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- 'assistant' + role }}{%- endif %}")
# LFM2.5's way: Python calls with keyword arguments between two markers, strings in single
# quotes, the assistant's turns in transformers' {% generation %} blocks; written here for
# the tests
PYTHONIC_TEMPLATE = (
    "{%- macro arg(v) -%}{%- if v is string -%}{{- \"'\" + v + \"'\" -}}"
    "{%- elif v is mapping -%}{{- v | tojson -}}{%- else -%}{{- v | string -}}{%- endif -%}"
    "{%- endmacro -%}"
    "{%- if tools -%}{{- '<|im_start|>system\nList of tools: ' + tools | tojson + "
    "'<|im_end|>\n' -}}{%- endif -%}"
    "{%- for m in messages -%}{{- '<|im_start|>' + m.role + '\n' -}}"
    "{%- if m.role == 'assistant' -%}{%- generation -%}{{- m.content or '' -}}"
    "{%- if m.tool_calls -%}{{- '<|tool_call_start|>[' -}}{%- for call in m.tool_calls -%}"
    "{{- call.function.name + '(' -}}{%- for k, v in call.function.arguments.items() -%}"
    "{{- k + '=' + arg(v) -}}{%- if not loop.last -%}{{- ', ' -}}{%- endif -%}{%- endfor -%}"
    "{{- ')' -}}{%- if not loop.last -%}{{- ', ' -}}{%- endif -%}{%- endfor -%}"
    "{{- ']<|tool_call_end|>' -}}{%- endif -%}{{- '<|im_end|>\n' -}}{%- endgeneration -%}"
    "{%- else -%}{{- (m.content or '') + '<|im_end|>\n' -}}{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}")
# MiniMax-M2's way: one block of invokes, each argument a named parameter whose value is raw
# text for a string and JSON otherwise; written here for the tests
MINIMAX_TEMPLATE = (
    "{%- if tools %}{{- ']~!b[]~b]system\n<tools>' + tools | tojson + '</tools>\nCall them as "
    "<minimax:tool_call><invoke name=...><parameter name=...>...</parameter></invoke>"
    "</minimax:tool_call>[e~[\n' }}{%- endif %}"
    "{%- for m in messages %}{%- if m.role == 'assistant' %}"
    "{{- ']~b]ai\n' + (m.content or '') }}{%- if m.tool_calls %}"
    "{{- '\n<minimax:tool_call>\n' }}{%- for call in m.tool_calls %}"
    "{{- '<invoke name=\"' + call.function.name + '\">' }}"
    "{%- for k, v in call.function.arguments.items() %}{{- '<parameter name=\"' + k + '\">' }}"
    "{{- v | tojson if v is not string else v }}{{- '</parameter>\n' }}{%- endfor %}"
    "{{- '</invoke>\n' }}{%- endfor %}{{- '</minimax:tool_call>' }}{%- endif %}"
    "{{- '[e~[\n' }}{%- elif m.role == 'tool' %}{{- ']~b]tool\n<response>' + m.content + "
    "'</response>[e~[\n' }}{%- else %}{{- ']~b]' + m.role + '\n' + m.content + '[e~[\n' }}"
    "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- ']~b]ai\n' }}{%- endif %}")
# Kimi K3's way: every part of a message a section between control tokens, the answer's text
# in a response section, its calls in a tools section (one section per argument, saying its
# type); `thinking` off unless asked (the real template thinks by default); written here
KIMI3_TEMPLATE = (
    "{%- macro open_tag(tag, attrs=[]) %}{{- '<|open|>' + tag }}{%- for a in attrs %}"
    "{{- ' ' + a[0] + '=\"' + (a[1] | string | replace('&', '&amp;') | replace('\"', '&quot;'))"
    " + '\"' }}{%- endfor %}{{- '<|sep|>' }}{%- endmacro %}"
    "{%- macro close_tag(tag) %}{{- '<|close|>' + tag + '<|sep|>' }}{%- endmacro %}"
    "{%- if thinking is undefined %}{%- set thinking = false %}{%- endif %}"
    "{%- if tools %}{{- open_tag('message', [('role', 'system')]) + '# Tools\\n' + "
    "tools | tojson + close_tag('message') + '<|end_of_msg|>' }}{%- endif %}"
    "{%- for m in messages %}{{- open_tag('message', [('role', m.role)]) }}"
    "{%- if m.role == 'assistant' %}{%- if thinking %}"
    "{{- open_tag('think') + (m.reasoning_content or '') + close_tag('think') }}{%- endif %}"
    "{{- open_tag('response') + (m.content or '') + close_tag('response') }}"
    "{%- if m.tool_calls %}{{- open_tag('tools') }}{%- for c in m.tool_calls %}"
    "{{- open_tag('call', [('tool', c.function.name), ('index', loop.index)]) }}"
    "{%- for k, v in c.function.arguments.items() %}{{- open_tag('argument', [('key', k), "
    "('type', 'string' if v is string else 'boolean' if v is boolean else 'number' if v is "
    "number else 'object')]) + (v if v is string else v | tojson) + close_tag('argument') }}"
    "{%- endfor %}{{- close_tag('call') }}{%- endfor %}{{- close_tag('tools') }}{%- endif %}"
    "{%- else %}{{- m.content }}{%- endif %}{{- close_tag('message') + '<|end_of_msg|>' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- open_tag('message', [('role', "
    "'assistant')]) + open_tag('think' if thinking else 'response') }}{%- endif %}")
# MiniMax-M3's way: every tag after the marker ]<]minimax[>[, each argument a tag named by its
# key, objects and arrays as nested tags, a bare </mm:think> before an answer that did not
# reason; written here for the tests
MINIMAX3_TEMPLATE = (
    "{%- set ns = ']<]minimax[>[' %}"
    "{%- macro xml(v) %}{%- if v is mapping %}{%- for k, x in v.items() %}"
    "{{- ns + '<' + k + '>' + xml(x) + ns + '</' + k + '>' }}{%- endfor %}"
    "{%- elif v is iterable and v is not string %}{%- for x in v %}"
    "{{- ns + '<item>' + xml(x) + ns + '</item>' }}{%- endfor %}"
    "{%- elif v is boolean %}{{- v | tojson }}{%- else %}{{- v }}{%- endif %}{%- endmacro %}"
    "{%- if tools %}{{- ']~b]system\n<tools>' + tools | tojson + '</tools>\nCall them as ' + "
    "ns + '<tool_call>' + ns + '<invoke name=\"...\">' + ns + '<key>value' + ns + '</key>' + "
    "ns + '</invoke>' + ns + '</tool_call>[e~[\n' }}{%- endif %}"
    "{%- for m in messages %}{%- if m.role == 'assistant' %}{{- ']~b]ai\n' }}"
    "{{- '<mm:think>' + m.reasoning_content + '</mm:think>' if m.reasoning_content else "
    "'</mm:think>' }}{{- m.content or '' }}{%- if m.tool_calls %}"
    "{{- ns + '<tool_call>\n' }}{%- for call in m.tool_calls %}"
    "{{- ns + '<invoke name=\"' + call.function.name + '\">' }}"
    "{%- for k, v in call.function.arguments.items() %}"
    "{{- ns + '<' + k + '>' + xml(v) + ns + '</' + k + '>' }}{%- endfor %}"
    "{{- ns + '</invoke>\n' }}{%- endfor %}{{- ns + '</tool_call>' }}{%- endif %}"
    "{{- '[e~[\n' }}{%- elif m.role == 'tool' %}{{- ']~b]tool\n<response>' + m.content + "
    "'</response>[e~[\n' }}{%- else %}{{- ']~b]' + m.role + '\n' + m.content + '[e~[\n' }}"
    "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- ']~b]ai\n' }}"
    "{%- if thinking_mode == 'enabled' %}{{- '<mm:think>' }}"
    "{%- elif thinking_mode == 'disabled' %}{{- '</mm:think>' }}{%- endif %}{%- endif %}")
# Gemma 4's way: a call's arguments in Gemma's notation (bare keys, strings between <|"|>
# marks), tool results on the model's turn as an older Gemma 4 template reads them, the
# thinking channel closed in the generation prompt unless enable_thinking; written here for
# the tests
GEMMA_TEMPLATE = r"""
{%- macro arg(v) -%}
{%- if v is string -%}{{- '<|"|>' + v + '<|"|>' -}}
{%- elif v is boolean -%}{{- 'true' if v else 'false' -}}
{%- elif v is mapping -%}{{- '{' -}}{%- for k, x in v | dictsort -%}{{- k + ':' -}}
{{- arg(x) -}}{%- if not loop.last -%},{%- endif -%}{%- endfor -%}{{- '}' -}}
{%- elif v is sequence -%}{{- '[' -}}{%- for x in v -%}{{- arg(x) -}}
{%- if not loop.last -%},{%- endif -%}{%- endfor -%}{{- ']' -}}
{%- else -%}{{- v -}}{%- endif -%}
{%- endmacro -%}
{%- set ns = namespace(prev='') -%}
{%- if tools -%}{{- '<|turn>system\n' -}}{%- for tool in tools -%}
{{- '<|tool>' + (tool | tojson) + '<tool|>' -}}{%- endfor -%}{{- '<turn|>\n' -}}{%- endif -%}
{%- for m in messages -%}{%- set ns.prev = '' -%}
{{- '<|turn>' + ('model' if m.role == 'assistant' else m.role) + '\n' -}}
{%- if m.tool_calls -%}{%- for call in m.tool_calls -%}
{{- '<|tool_call>call:' + call.function.name + arg(call.function.arguments) + '<tool_call|>' -}}
{%- endfor -%}{%- endif -%}
{%- if m.tool_responses -%}{%- for r in m.tool_responses -%}
{{- '<|tool_response>response:' + r.name -}}
{{- arg(r.response) if r.response is mapping else '{value:' + arg(r.response) + '}' -}}
{{- '<tool_response|>' -}}{%- endfor -%}{%- set ns.prev = 'tool_response' -%}{%- endif -%}
{%- if m.content -%}{{- m.content -}}{%- endif -%}
{%- if not (m.tool_responses and not m.content) -%}{{- '<turn|>\n' -}}{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{%- if ns.prev != 'tool_response' -%}{{- '<|turn>model\n' -}}{%- endif -%}
{%- if not enable_thinking | default(false) -%}{{- '<|channel>thought\n<channel|>' -}}{%- endif -%}
{%- endif -%}"""
# DeepSeek's way (V3, the R1 distills): one section of calls, each naming its function
# outside the JSON of its arguments; written here for the tests
DEEPSEEK_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n# Tools\\n' }}{%- for tool in tools %}"
    "{{- (tool | tojson) + '\\n' }}{%- endfor %}"
    "{{- 'Call them with <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME"
    "\\n```json\\n{...}\\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' %}{{- '<|im_start|>assistant\\n' + (m.content or '') }}"
    "{%- if m.tool_calls %}{{- '<｜tool▁calls▁begin｜>' }}{%- for call in m.tool_calls %}"
    "{{- '<｜tool▁call▁begin｜>function<｜tool▁sep｜>' + call.function.name + '\\n```json\\n' + "
    "(call.function.arguments | tojson) + '\\n```<｜tool▁call▁end｜>' }}{%- endfor %}"
    "{{- '<｜tool▁calls▁end｜>' }}{%- endif %}{{- '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' %}{{- '<|im_start|>user\\n<tool_output>' + m.content + "
    "'</tool_output><|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
# DeepSeek-V3.1's way: the name before the separator and the arguments' JSON right after it
# (no type, no fence); written here for the tests
DEEPSEEK_V31_TEMPLATE = DEEPSEEK_TEMPLATE.replace(
    "function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```", "NAME<｜tool▁sep｜>{...}").replace(
    "'<｜tool▁call▁begin｜>function<｜tool▁sep｜>' + call.function.name + '\\n```json\\n' + "
    "(call.function.arguments | tojson) + '\\n```<｜tool▁call▁end｜>'",
    "'<｜tool▁call▁begin｜>' + call.function.name + '<｜tool▁sep｜>' + "
    "(call.function.arguments | tojson) + '<｜tool▁call▁end｜>'")
# Kimi K2's way: V3.1's bare form with its own markers, each call named by an id that holds
# the function's name and the conversation's call count; written here for the tests
KIMI_TEMPLATE = (
    "{%- set count = namespace(value=0) %}"
    "{%- if tools %}{{- '<|im_start|>system\\n# Tools\\n' + (tools | tojson) + '\\n' }}"
    "{{- 'Call them with <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0"
    "<|tool_call_argument_begin|>{...}<|tool_call_end|><|tool_calls_section_end|><|im_end|>"
    "\\n' }}{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' %}{{- '<|im_start|>assistant\\n' + (m.content or '') }}"
    "{%- if m.tool_calls %}{{- '<|tool_calls_section_begin|>' }}{%- for call in m.tool_calls %}"
    "{{- '<|tool_call_begin|>functions.' + call.function.name + ':' + (count.value | string) + "
    "'<|tool_call_argument_begin|>' + (call.function.arguments | tojson) + '<|tool_call_end|>' }}"
    "{%- set count.value = count.value + 1 %}{%- endfor %}"
    "{{- '<|tool_calls_section_end|>' }}{%- endif %}{{- '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' %}{{- '<|im_start|>system\\n## Return of ' + "
    "(m.tool_call_id or '') + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
# Seed-OSS's way: Qwen3-Coder's XML calls in <seed:tool_call> blocks, each value right between
# its tags, thinking in <seed:think>; written here for the tests
SEED_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n# Tools\\n' + (tools | tojson) + '\\n' }}"
    "{{- 'Call them with <seed:tool_call>\\n<function=NAME>\\n<parameter=P>value</parameter>"
    "\\n</function>\\n</seed:tool_call><|im_end|>\\n' }}{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if m.reasoning_content %}{{- '<seed:think>' + m.reasoning_content + '</seed:think>' }}"
    "{%- endif %}{{- m.content or '' }}"
    "{%- for call in m.tool_calls or [] %}{{- '\\n<seed:tool_call>\\n<function=' + "
    "call.function.name + '>\\n' }}{%- for k, v in call.function.arguments | items %}"
    "{{- '<parameter=' + k + '>' + (v if v is string else v | tojson) + '</parameter>\\n' }}"
    "{%- endfor %}{{- '</function>\\n</seed:tool_call>' }}{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' %}{{- '<|im_start|>tool\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
# MiniCPM5's way: each call alone, `<function name="NAME"><param name="P">value</param>
# </function>`, a string holding <, & or a line break in CDATA; written here for the tests
MINICPM_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n# Tools\\n' + (tools | tojson) + '\\n' }}"
    "{{- 'Call one with <function name=\"NAME\"><param name=\"P\">value</param></function>"
    "<|im_end|>\\n' }}{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' %}{{- '<|im_start|>assistant\\n' + (m.content or '') }}"
    "{%- for call in m.tool_calls or [] %}{{- '<function name=\"' + call.function.name + "
    "'\">' }}{%- for k, v in call.function.arguments | items %}{{- '<param name=\"' + k + "
    "'\">' }}{%- if v is string and ('<' in v or '&' in v or '\\n' in v) %}"
    "{{- '<![CDATA[' + v + ']]>' }}{%- elif v is string %}{{- v }}{%- else %}"
    "{{- v | tojson }}{%- endif %}{{- '</param>' }}{%- endfor %}{{- '</function>' }}"
    "{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' %}{{- '<|im_start|>user\\n<tool_response>\\n' + m.content + "
    "'\\n</tool_response><|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
# DeepSeek-V3.2's way: MiniMax's invokes in DSML tags, each parameter saying whether its
# value is a string (raw) or not (JSON); written here for the tests
DSML_TEMPLATE = (
    "{%- set d = '｜DSML｜' %}"
    "{%- if tools %}{{- '<|im_start|>system\\n# Tools\\n' + (tools | tojson) + '\\n' }}"
    "{{- 'Call them in <' + d + 'function_calls> blocks.<|im_end|>\\n' }}{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' %}{{- '<|im_start|>assistant\\n' + (m.content or '') }}"
    "{%- if m.tool_calls %}{{- '\\n\\n<' + d + 'function_calls>\\n' }}"
    "{%- for call in m.tool_calls %}{{- '<' + d + 'invoke name=\"' + call.function.name + "
    "'\">\\n' }}{%- for k, v in call.function.arguments | items %}{%- if v is string %}"
    "{{- '<' + d + 'parameter name=\"' + k + '\" string=\"true\">' + v }}{%- else %}"
    "{{- '<' + d + 'parameter name=\"' + k + '\" string=\"false\">' + (v | tojson) }}"
    "{%- endif %}{{- '</' + d + 'parameter>\\n' }}{%- endfor %}"
    "{{- '</' + d + 'invoke>\\n' }}{%- endfor %}{{- '</' + d + 'function_calls>' }}"
    "{%- endif %}{{- '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' %}{{- '<|im_start|>user\\n<function_results>' + m.content + "
    "'</function_results><|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
# Command R7B's way: an action block with a JSON list of calls (id, tool_name, parameters);
# written here for the tests
COMMANDR_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n# Tools\\n' }}{%- for tool in tools %}"
    "{{- (tool | tojson) + '\\n' }}{%- endfor %}"
    "{{- 'Act with <|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": ..., "
    "\"parameters\": {...}}]<|END_ACTION|><|im_end|>\\n' }}{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' %}{{- '<|im_start|>assistant\\n' + (m.content or '') }}"
    "{%- if m.reasoning_content %}{{- '<|START_THINKING|>' + m.reasoning_content + "
    "'<|END_THINKING|>' }}{%- endif %}"
    "{%- if m.tool_calls %}{{- '<|START_ACTION|>[' }}{%- for call in m.tool_calls %}"
    "{{- '{\"tool_call_id\": \"' + loop.index0 | string + '\", \"tool_name\": \"' + "
    "call.function.name + '\", \"parameters\": ' + (call.function.arguments | tojson) + '}' }}"
    "{%- if not loop.last %}{{- ', ' }}{%- endif %}{%- endfor %}"
    "{{- ']<|END_ACTION|>' }}{%- endif %}{{- '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' %}{{- '<|im_start|>user\\n<|START_TOOL_RESULT|>' + "
    "m.content + '<|END_TOOL_RESULT|><|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
AGENT_WORDS = ("<tool_call>", "</tool_call>", "<think>", "</think>", "<|im_start|>",
               "<|im_end|>")
# gpt-oss's markers. llama.cpp makes <|end|> user-defined and drops it from the end-of-
# generation tokens when <|return|> and <|call|> are there, as in gpt-oss's own file
HARMONY_WORDS = ("<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>",
                 "<|return|>", "<|call|>")
# Command R7B's markers: control tokens, which show as nothing unless lsd shows them
COMMANDR_WORDS = ("<|START_ACTION|>", "<|END_ACTION|>", "<|START_THINKING|>",
                  "<|END_THINKING|>")
# GLM-4.5's argument tags (llama.cpp preserves them as GLM's special tokens)
GLM_WORDS = ("<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")
# Gemma 4's markers (control tokens in its vocabulary)
GEMMA_WORDS = ("<|tool_call>", "<tool_call|>", '<|"|>', "<|channel>", "<channel|>", "<|turn>",
               "<turn|>", "<|tool_response>", "<tool_response|>")
# Kimi K2's call markers (special tokens of its vocabulary)
KIMI_WORDS = ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
              "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>")
# Seed-OSS's call and thinking markers (special tokens of its vocabulary)
SEED_WORDS = ("<seed:tool_call>", "</seed:tool_call>", "<seed:think>", "</seed:think>")
# DeepSeek-V3.2's DSML tags, as words of their own (so that a call fits the tests' max_tokens)
DSML_WORDS = ("<｜DSML｜function_calls>", "</｜DSML｜function_calls>", "<｜DSML｜invoke",
              "</｜DSML｜invoke>", "<｜DSML｜parameter", "</｜DSML｜parameter>")
# MiniCPM5's call tags (tokens of its vocabulary, which llama.cpp preserves)
MINICPM_WORDS = ("<function", "</function>", "<param", "</param>")
# MiniMax-M3's marker and thinking tags (control tokens), and its invoke tags as words
MINIMAX3_WORDS = ("]<]minimax[>[", "<mm:think>", "</mm:think>")
MINIMAX3_TAGS = ('<invoke name="', "</invoke>")
# Ling 3's end of turn: a control token its GGUF need not mark as an end of generation
LING_WORDS = ("<|role_end|>",)
LING_TEMPLATE = (
    "{%- for m in messages %}{{- '<role>' + m.role | upper + '</role>' + m.content + "
    "'<|role_end|>' }}{%- endfor %}{%- if add_generation_prompt %}"
    "{{- '<role>ASSISTANT</role>' }}{%- endif %}")
# Kimi K3's markers (control tokens), and its section names and attributes as words
KIMI3_WORDS = ("<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>")
KIMI3_TAGS = ("think", "response", "tools", "call", "argument", "message", ' tool="',
              ' index="', ' key="', ' type="', "string", "boolean")
# Tencent Hy3's tags (control tokens in its vocabulary)
HY3_WORDS = tuple(f"<{tag}:opensource>" for tag in (
    "tool_calls", "/tool_calls", "tool_call", "/tool_call", "tool_sep", "arg_key", "/arg_key",
    "arg_value", "/arg_value", "think", "/think")) + (
    "<｜hy_User:opensource｜>", "<｜hy_Assistant:opensource｜>")
# control tokens, as in Qwen's vocabulary, gpt-oss's, Command R7B's, GLM's, Gemma's, Kimi's,
# Seed-OSS's and MiniCPM5's
CONTROL_WORDS = ("<|im_start|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
                 *COMMANDR_WORDS, *GLM_WORDS, *GEMMA_WORDS, *KIMI_WORDS, *SEED_WORDS,
                 *MINICPM_WORDS, *MINIMAX3_WORDS, *KIMI3_WORDS, *LING_WORDS, *HY3_WORDS)


def make_agent_model(directory: Path) -> Path:
    """make_pair's target with the agent template and its markers as single tokens of their
    own (user-defined tokens, as Qwen's <tool_call> is): agent-shaped prompts and answers on
    real llama.cpp."""
    spec = TinySpec(words=tuple(WORDS) + AGENT_WORDS)
    weights = random_weights(spec, 259 + len(spec.words))
    path = write_gguf(directory / "agent.gguf", spec, weights, AGENT_TEMPLATE)
    return path


# gpt-oss's way (harmony): a developer message with the tools, every message a header and a
# body, calls as commentary to functions.NAME; written here for the tests
HARMONY_TEMPLATE = (
    "<|start|>system<|message|>Reasoning: {{ reasoning_effort | default('medium') }}<|end|>"
    "{%- if tools %}{{- '<|start|>developer<|message|># Tools\\nnamespace functions {' }}"
    "{%- for tool in tools %}{{- '\\n// ' + tool.function.description + '\\ntype ' + "
    "tool.function.name + ' = (_: ' + (tool.function.parameters | tojson) + ') => any;' }}"
    "{%- endfor %}{{- '\\n}<|end|>' }}{%- endif %}"
    "{%- set ns = namespace(called='') %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' %}"
    "{%- if m.thinking %}{{- '<|start|>assistant<|channel|>analysis<|message|>' + m.thinking "
    "+ '<|end|>' }}{%- endif %}"
    "{%- if m.tool_calls %}{%- for call in m.tool_calls %}{%- set ns.called = "
    "call.function.name %}{{- '<|start|>assistant<|channel|>commentary to=functions.' + "
    "call.function.name + ' <|constrain|>json<|message|>' + (call.function.arguments | tojson)"
    " + '<|call|>' }}{%- endfor %}"
    "{%- else %}{{- '<|start|>assistant<|channel|>final<|message|>' + m.content + '<|end|>' }}"
    "{%- endif %}"
    "{%- elif m.role == 'tool' %}{{- '<|start|>functions.' + ns.called + ' to=assistant"
    "<|channel|>commentary<|message|>' + m.content + '<|end|>' }}"
    "{%- else %}{{- '<|start|>' + m.role + '<|message|>' + m.content + '<|end|>' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start|>assistant' }}{%- endif %}")


# ChatML that shows no tools: the default of a GGUF that names a "tool_use" template beside it
# (as Hermes 2 Pro's and Hermes 3's do)
TOOLLESS_TEMPLATE = (
    "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + (m.content or '') + "
    "'<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def make_named_templates_model(directory: Path) -> Path:
    """make_agent_model's target with two named templates: a default that shows no tools,
    and the agent template named "tool_use"."""
    spec = TinySpec(words=tuple(WORDS) + AGENT_WORDS)
    weights = random_weights(spec, 259 + len(spec.words))
    return write_gguf(directory / "named.gguf", spec, weights,
                      [{"name": "default", "template": TOOLLESS_TEMPLATE},
                       {"name": "tool_use", "template": AGENT_TEMPLATE}])


def _marked_model(directory: Path, name: str, markers: tuple[str, ...], template) -> Path:
    """make_pair's target with the agent words, a family's markers as words of their own
    (control tokens where CONTROL_WORDS has them) and its template, as `name`.gguf."""
    spec = TinySpec(words=tuple(WORDS) + AGENT_WORDS + markers)
    weights = random_weights(spec, 259 + len(spec.words))
    return write_gguf(directory / f"{name}.gguf", spec, weights, template)


def make_commandr_model(directory: Path) -> Path:
    """make_pair's target with the Command R7B-style template and its markers as control
    tokens, as Cohere's vocabulary has them."""
    return _marked_model(directory, "commandr", COMMANDR_WORDS, COMMANDR_TEMPLATE)


def make_glm_model(directory: Path) -> Path:
    """make_pair's target with the GLM-4.5-style template and its argument tags as control
    tokens (which show as nothing unless lsd shows them)."""
    return _marked_model(directory, "glm", GLM_WORDS, GLM_TEMPLATE)


def make_gemma_model(directory: Path) -> Path:
    """make_pair's target with the Gemma-4-style template and its markers as control tokens
    (which show as nothing unless lsd shows them)."""
    return _marked_model(directory, "gemma", GEMMA_WORDS, GEMMA_TEMPLATE)


def make_kimi_model(directory: Path) -> Path:
    """make_pair's target with the Kimi-K2-style template and its call markers as control
    tokens (which show as nothing unless lsd shows them)."""
    return _marked_model(directory, "kimi", KIMI_WORDS, KIMI_TEMPLATE)


def make_seed_model(directory: Path) -> Path:
    """make_pair's target with the Seed-OSS-style template and its markers as control
    tokens."""
    return _marked_model(directory, "seed", SEED_WORDS, SEED_TEMPLATE)


def make_minicpm_model(directory: Path) -> Path:
    """make_pair's target with the MiniCPM5-style template and its call tags as control
    tokens."""
    return _marked_model(directory, "minicpm", MINICPM_WORDS, MINICPM_TEMPLATE)


def make_dsml_model(directory: Path) -> Path:
    """make_pair's target with the DeepSeek-V3.2-style template and its DSML tags."""
    return _marked_model(directory, "dsml", DSML_WORDS, DSML_TEMPLATE)


def make_minimax3_model(directory: Path) -> Path:
    """make_pair's target with the MiniMax-M3-style template, its marker as a control token
    and its invoke tags as words."""
    return _marked_model(directory, "minimax3", MINIMAX3_WORDS + MINIMAX3_TAGS,
                         MINIMAX3_TEMPLATE)


def make_ling_model(directory: Path) -> Path:
    """make_pair's target with a Ling-3-style template, its end of turn a control token
    that is no end of generation."""
    return _marked_model(directory, "ling", LING_WORDS, LING_TEMPLATE)


def make_kimi3_model(directory: Path) -> Path:
    """make_pair's target with the Kimi-K3-style template, its markers as control tokens
    and its section names as words."""
    return _marked_model(directory, "kimi3", KIMI3_WORDS + KIMI3_TAGS, KIMI3_TEMPLATE)


def make_hy3_model(directory: Path) -> Path:
    """make_pair's target with the Hy3-style template and its tags as control tokens."""
    return _marked_model(directory, "hy3", HY3_WORDS, HY3_TEMPLATE)


def make_harmony_model(directory: Path) -> Path:
    """make_pair's target with the harmony template and gpt-oss's markers as tokens of
    their own (as llama.cpp loads gpt-oss: <|return|> and <|call|> end a generation)."""
    spec = TinySpec(words=tuple(WORDS) + HARMONY_WORDS)
    weights = random_weights(spec, 259 + len(spec.words))
    return write_gguf(directory / "harmony.gguf", spec, weights, HARMONY_TEMPLATE)


# Two tools and a question for the agent model (tests of the library and of the server)
AGENT_TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The weather of a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "enum": ["Paris", "Rome"]},
            "metric": {"type": "boolean"}}, "required": ["city", "metric"]}}},
    {"type": "function", "function": {"name": "now", "description": "The time",
                                      "parameters": {"type": "object", "properties": {}}}},
]
AGENT_ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def agent_token(vocab, text: str) -> int:
    """The id of one of AGENT_WORDS in a loaded agent model's vocabulary."""
    ids = vocab.tokenize(text, add_special=False)
    assert len(ids) == 1, (text, ids)
    return ids[0]


def valid_call(call) -> bool:
    """An agent model's call (chat.output.ToolCall) names one of AGENT_TOOLS and its
    arguments are what that tool's schema admits."""
    import json

    args = json.loads(call.arguments)
    if call.name == "now":
        return args == {}
    return call.name == "get_weather" and args["city"] in ("Paris", "Rome") and \
        isinstance(args["metric"], bool) and set(args) == {"city", "metric"}


def stop_bias(eng, extra=None) -> dict:
    """The end-of-text token made likely, so that an answer ends once its grammar allows
    (a random model would ramble on), and whatever else a test biases."""
    return {eng.target.vocab.eos_token: 30.0, **(extra or {})}


def streamed_pieces(gen) -> list[tuple]:
    """(id, name, arguments) per call, from a generation's streamed tool-call pieces."""
    calls: dict = {}
    for event in gen:
        for piece in event.tool_calls:
            if piece.name is not None:
                calls[piece.index] = [piece.id, piece.name, ""]
            calls[piece.index][2] += piece.arguments
    return [tuple(calls[i]) for i in sorted(calls)]


def accept_text(grammar, vocab, text: str, probe: tuple[str, int] | None = None,
                tokenize=None) -> None:
    """Feed text's tokens to a grammar as a generation would, each checked first; with
    `probe` (prefix, token): once exactly the prefix is fed, the token must be refused.
    `tokenize(text)`: its tokens (default: the vocabulary's tokenizer)."""
    fed = ""
    tokens = tokenize(text) if tokenize else vocab.tokenize(text, add_special=False)
    for token in tokens:
        if probe is not None and fed == probe[0]:
            assert not grammar.allows(probe[1]), fed
            probe = None
        assert grammar.allows(token), (text, fed, token)
        grammar.accept(token, checked=True)
        fed += vocab.token_bytes(token).decode("utf-8", "replace")
    assert probe is None, "the probe's prefix never ended on a token boundary"


def spelled(vocab, text: str, words: tuple[str, ...]) -> list[int]:
    """`text` as tokens that spell it exactly: each of `words` as its own token, the rest one
    byte at a time (the SentencePiece tokenizer would put a space after every word token)."""
    import re

    spell, tokens = vocab.byte_tokens(), []
    for piece in re.split("(" + "|".join(map(re.escape, words)) + ")", text):
        if piece in words:
            tokens.append(agent_token(vocab, piece))
        else:
            tokens += [spell[b] for b in piece.encode()]
    return tokens


def plan_admits(model_path: Path, plan, text: str, ends: bool = False) -> bool:
    """Whether a tool plan's grammar (chat/tools.ToolPlan), compiled by llama.cpp for the
    tiny model at `model_path`, admits `text` whole, spelled one byte per token; with
    `ends`, also that the grammar may end right after it (end of generation allowed)."""
    from lsd_local.backend import Grammar, Model, schema_to_gbnf

    model = Model.load(model_path)
    try:
        grammar = Grammar.compile(model, plan.grammar(schema_to_gbnf)[0], source="test")
        try:
            spell = model.vocab.byte_tokens()  # one token per byte: the text exactly
            for token in (spell[b] for b in text.encode()):
                if not grammar.allows(token):
                    return False
                grammar.accept(token, checked=True)
            return not ends or grammar.allows(model.vocab.eos_token)
        finally:
            grammar.close()
    finally:
        model.close()
