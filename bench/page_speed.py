"""Does the chat page cost decode speed? The same request, alternately through the `openai`
SDK (a plain stream) and through the page in headless Chromium (its stream asks for
`lsd_rounds` and `logprobs`), against one `lsd serve`; both sides must write the same text.
Prints each run's decode tok/s (what the server measured, as the page's panel shows it after
the answer) and the median ratio page / SDK.

    .venv/bin/python bench/page_speed.py [--model PATH] [--repeat 5] [--max-tokens 128]

Needs chromium, chromium-driver and selenium (see tests/browser/).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import openai

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "browser"))
import serving  # noqa: E402
from test_page_browser import answers, by_css, find_chromium, open_page, wait_until  # noqa: E402

from lsd_local.models.embedded import embedded_model  # noqa: E402

PROMPT = ("Write a Python function `merge_intervals(intervals)` that merges overlapping "
          "intervals, with a docstring and two examples.")


def browser():
    from selenium import webdriver

    found = find_chromium()
    if found is None:
        raise SystemExit("needs chromium and chromedriver on PATH")
    options = webdriver.ChromeOptions()
    options.binary_location = found[0]
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                 "--window-size=1400,900"):
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(found[1]))


def through_sdk(server, max_tokens: int, page_fields: bool = False) -> tuple[float, str]:
    """page_fields: ask what the page asks (lsd_rounds, logprobs): the server's share."""
    client = openai.OpenAI(base_url=server.base_url, api_key="none", timeout=900)
    text, tps = "", None
    extra = {"extra_body": {"lsd_rounds": True}, "logprobs": True} if page_fields else {}
    for chunk in client.chat.completions.create(
            model="lsd", messages=[{"role": "user", "content": PROMPT}], stream=True,
            max_tokens=max_tokens, temperature=0, **extra):
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        lsd = (chunk.model_extra or {}).get("lsd")
        if lsd and "decode_tokens_per_second" in lsd:
            tps = lsd["decode_tokens_per_second"]
    return tps, text


def through_page(driver, server, max_tokens: int) -> tuple[float, str]:
    from selenium.webdriver.common.keys import Keys

    open_page(driver, server.port)
    limit = by_css(driver, "input[name=max_tokens]")[0]
    limit.send_keys(str(max_tokens))
    prompt = by_css(driver, "#prompt")[0]
    prompt.send_keys(PROMPT)
    prompt.send_keys(Keys.ENTER)
    # (asking the browser costs CPU the server misses: seldom, while it decodes)
    wait_until(driver, lambda d: not by_css(d, "#send")[0].get_attribute("disabled")
               and answers(d), "the answer", poll=2.0)
    by_css(driver, "#show-origins")[0].click()  # off: the Markdown source is not shown, so
    text = driver.execute_script(  # read the stored answer, as the page kept it
        "const c = JSON.parse(localStorage.getItem('lsd.conversations'))[0];"
        "return c.messages[c.messages.length - 1].content;")
    by_css(driver, "#show-origins")[0].click()
    return float(by_css(driver, "#stat-tps")[0].text), text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="default: the embedded model")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args()
    model = args.model or embedded_model()
    driver = browser()
    try:
        # (no suffix index: every run would draft the same answer from the runs before it)
        with serving.Server(model, "--ctx", "4096", "--threads", "2", "--suffix-tokens",
                            "0") as server:
            through_sdk(server, 8)  # warm: the kernels, the page's files
            sdk, page, fields = [], [], []
            for rep in range(args.repeat):
                tps_sdk, text_sdk = through_sdk(server, args.max_tokens)
                tps_fields, text_fields = through_sdk(server, args.max_tokens, True)
                tps_page, text_page = through_page(driver, server, args.max_tokens)
                same = text_sdk == text_page == text_fields
                print(f"run {rep + 1}: SDK {tps_sdk:.1f} tok/s, SDK with the page's fields "
                      f"{tps_fields:.1f}, page {tps_page:.1f} tok/s, "
                      f"{'same text' if same else 'DIFFERENT TEXT'}", flush=True)
                if same:
                    sdk.append(tps_sdk)
                    page.append(tps_page)
                    fields.append(tps_fields)
    finally:
        driver.quit()
    if not sdk:
        raise SystemExit("no run wrote the same text on both sides")
    ratios = [p / s for p, s in zip(page, sdk, strict=True)]
    print(f"SDK with the page's fields / SDK median "
          f"{statistics.median(f / s for f, s in zip(fields, sdk, strict=True)):.3f}")
    print(f"median decode tok/s: SDK {statistics.median(sdk):.1f}, page "
          f"{statistics.median(page):.1f}; page / SDK median {statistics.median(ratios):.3f} "
          f"(range {min(ratios):.3f}-{max(ratios):.3f}, {len(ratios)} runs with equal text)")


if __name__ == "__main__":
    main()
