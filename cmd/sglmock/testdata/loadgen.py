#!/usr/bin/env python3
"""A small load generator that behaves like the serving benchmarks people run.

It sends what SGLang's bench_serving and vLLM's benchmark_serving send and
measures what they measure, with the Python standard library only, so that
sglmock's tests can run it under `sglmock audit`:

  * a warm-up that repeats the first prompt (bench_serving's warm-up with at
    most 32 output tokens, vLLM's test prompt with all of them), unless
    --warmup 0; several at once, as bench_serving gathers its
    --warmup-requests; and optionally a flush after it (--flush-cache, as
    bench_serving's: one POST /flush_cache, its answer ignored, then 1 s);
  * random prompts whose first word is one of four, so that prompts often
    start alike by chance (--dataset random);
  * groups of prompts that share a system prompt (--dataset shared-prefix,
    bench_serving's generated-shared-prefix);
  * chat prompts with a fresh UUID first in the user message
    (--dataset chat-nonce);
  * streamed requests on /generate (--backend sglang), /v1/completions
    (--backend vllm, or sglang-oai) or /v1/chat/completions (--backend chat,
    or sglang-oai-chat), one at a time or --concurrency at once;
  * the ITL each tool counts: on /generate an event's gap spread over the
    tokens meta_info counts; on bench_serving's sglang-oai backends, when
    the server reports an accept length (/server_info), spread over the
    tokens the event's text retokenizes into (here a word or a punctuation
    mark a token, as the mock's output text is); else one gap an event;
  * a result file in bench_serving's format (JSON lines, --output-file, as
    Python's json.dumps writes it: "request_rate": Infinity at the default
    rate) or vLLM's (--save-result FILE; "request_rate": "inf"; E2E only
    when --percentile-metrics names e2el, as vLLM's default ttft,tpot,itl
    does not).

The server is --base-url, else $SGLANG_URL, else $OPENAI_BASE_URL without its
/v1, else http://127.0.0.1:30000 (a script with a fixed URL). Proxies come
from the environment (HTTP_PROXY, NO_PROXY), as urllib takes them.
"""

import argparse
import json
import os
import random
import re
import sys
import threading
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor

HEADS = ["Alpha", "Bravo", "Charlie", "Delta"]
WORDS = """time person year way day thing man world life hand part child eye woman place work week case point
government company number group problem fact river stone cloud garden window letter engine market bridge silver
thunder orange marble candle forest harbor ladder pepper saddle tunnel velvet walnut yellow zipper anchor""".split()


def base_url():
    if ARGS.base_url:
        return ARGS.base_url.rstrip("/")
    if os.environ.get("SGLANG_URL"):
        return os.environ["SGLANG_URL"].rstrip("/")
    if os.environ.get("OPENAI_BASE_URL"):
        return os.environ["OPENAI_BASE_URL"].rstrip("/").removesuffix("/v1")
    return "http://127.0.0.1:30000"


def words(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def random_prompts(rng, n):
    return [rng.choice(HEADS) + " " + words(rng, rng.randint(200, 500)) for _ in range(n)]


def shared_prefix_prompts(rng, groups, per_group):
    systems = [rng.choice(HEADS) + " " + words(rng, 400) for _ in range(groups)]
    prompts = [systems[g] + "\n\n" + rng.choice(HEADS) + " " + words(rng, 100) for g in range(groups) for _ in range(per_group)]
    rng.shuffle(prompts)
    return prompts


def chat_nonce_prompts(rng, n):
    return [str(uuid.UUID(int=rng.getrandbits(128), version=4)) + " " + words(rng, rng.randint(200, 400)) for _ in range(n)]


def post(path, body, stream):
    req = urllib.request.Request(base_url() + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          "Authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", "none")})
    return urllib.request.urlopen(req, timeout=600)


class Output:
    def __init__(self):
        self.success, self.ttft, self.latency, self.itl, self.output_len, self.error = False, 0.0, 0.0, [], 0, ""
        self.chunks = []  # the text of each event after the first


def retokenize(text):
    """The tool's tokenizer stand-in: a word or a punctuation mark a token."""
    return len(re.findall(r"\w+|[^\w\s]", text))


def request(prompt, output_len):
    """Sends one streamed request and times it as the tools do."""
    out = Output()
    if ARGS.backend == "sglang":
        path, body = "/generate", {"text": prompt, "stream": True,
                                   "sampling_params": {"max_new_tokens": output_len, "temperature": 0.0, "ignore_eos": True}}
    elif ARGS.backend in ("vllm", "sglang-oai"):
        path, body = "/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": output_len, "temperature": 0.0,
                                         "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    else:
        path, body = "/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": prompt}],
                                              "max_tokens": output_len, "temperature": 0.0, "stream": True,
                                              "stream_options": {"include_usage": True}}
    st = time.perf_counter()
    last, last_len = st, 0
    try:
        with post(path, body, True) as resp:
            for raw in resp:
                line = raw.decode().strip()
                if not line.startswith("data:"):
                    continue
                data = line[len("data:"):].strip()
                if data == "[DONE]":
                    continue
                chunk = json.loads(data)
                now = time.perf_counter()
                if ARGS.backend == "sglang":
                    if not chunk.get("text"):
                        continue
                    n = chunk["meta_info"]["completion_tokens"]
                    if out.ttft == 0.0:
                        out.ttft = now - st
                    elif n > last_len:
                        # bench_serving splits an event's gap over its tokens.
                        out.itl.extend([(now - last) / (n - last_len)] * (n - last_len))
                    else:
                        continue
                    last, last_len, out.output_len = now, n, n
                    continue
                if chunk.get("usage"):
                    out.output_len = chunk["usage"]["completion_tokens"]
                choices = chunk.get("choices") or [{}]
                text = choices[0].get("text") or (choices[0].get("delta") or {}).get("content")
                if not text:
                    continue
                if out.ttft == 0.0:
                    out.ttft = now - st
                else:
                    out.itl.append(now - last)
                    out.chunks.append(text)
                last = now
        out.latency = time.perf_counter() - st
        out.success = True
    except Exception as e:  # the tools count a failed request and go on
        out.error = repr(e)
    return out


def mean(xs):
    return sum(xs) / len(xs) if xs else 0.0


def percentile(xs, p):
    """numpy's percentile, linear interpolation."""
    if not xs:
        return 0.0
    s = sorted(xs)
    at = p / 100 * (len(s) - 1)
    lo = int(at)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (at - lo)


def std(xs):
    m = mean(xs)
    return (sum((x - m) ** 2 for x in xs) / len(xs)) ** 0.5 if xs else 0.0


def main():
    global ARGS, MODEL
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=["sglang", "vllm", "chat", "sglang-oai", "sglang-oai-chat"], default="sglang")
    ap.add_argument("--dataset", choices=["random", "shared-prefix", "chat-nonce"], default="random")
    ap.add_argument("--num-prompts", type=int, default=20)
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--per-group", type=int, default=4)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=1, help="warm-up requests with the first prompt")
    ap.add_argument("--flush-cache", action="store_true", help="POST /flush_cache after the warm-up")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--request-rate", type=float, default=float("inf"),
                    help="written to the result file as the tools write it (the requests go as --concurrency allows)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--base-url")
    ap.add_argument("--output-file", help="append bench_serving's JSON line")
    ap.add_argument("--save-result", help="write vLLM's JSON result")
    ap.add_argument("--percentile-metrics", default="ttft,tpot,itl",
                    help="the figures vLLM's result holds (its default leaves out e2el)")
    ARGS = ap.parse_args()
    rng = random.Random(ARGS.seed)
    if ARGS.dataset == "random":
        prompts = random_prompts(rng, ARGS.num_prompts)
    elif ARGS.dataset == "shared-prefix":
        prompts = shared_prefix_prompts(rng, ARGS.groups, ARGS.per_group)
    else:
        prompts = chat_nonce_prompts(rng, ARGS.num_prompts)
    MODEL = "default"
    if ARGS.backend != "sglang":
        with urllib.request.urlopen(base_url() + "/v1/models", timeout=60) as resp:
            MODEL = json.load(resp)["data"][0]["id"]

    if ARGS.warmup > 0:
        # Both tools warm up with their first prompt: bench_serving with at
        # most 32 output tokens, vLLM's test prompt with all of them.
        warm = min(ARGS.output_len, 32) if ARGS.backend == "sglang" else ARGS.output_len
        with ThreadPoolExecutor(max_workers=ARGS.warmup) as pool:
            outs = list(pool.map(lambda _: request(prompts[0], warm), range(ARGS.warmup)))
        if not any(o.success for o in outs):
            sys.exit("warm-up failed: " + outs[0].error)
        print(f"warm-up done ({ARGS.warmup} request{'s' if ARGS.warmup > 1 else ''} with the first prompt)")
    if ARGS.flush_cache:
        try:
            post("/flush_cache", {}, False).close()
        except Exception as e:
            print("flush:", e)
        time.sleep(1.0)

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=ARGS.concurrency) as pool:
        outputs = list(pool.map(lambda p: request(p, ARGS.output_len), prompts))
    duration = time.perf_counter() - start

    ok = [o for o in outputs if o.success]
    ttfts, e2es = [o.ttft for o in ok], [o.latency for o in ok]
    tpots = [(o.latency - o.ttft) / (o.output_len - 1) for o in ok if o.output_len > 1]
    accept_length = None
    if ARGS.output_file and "sglang" in ARGS.backend:
        # bench_serving reads the accept length after its run.
        with urllib.request.urlopen(base_url() + "/server_info", timeout=60) as resp:
            states = json.load(resp).get("internal_states") or [{}]
            accept_length = states[0].get("avg_spec_accept_length")
    if ARGS.backend.startswith("sglang-oai") and accept_length:
        # bench_serving's use_retokenized_itl: each event's gap spread over
        # the tokens its text retokenizes into.
        itls = [gap / n for o in ok for gap, chunk in zip(o.itl, o.chunks) for n in [retokenize(chunk)] for _ in range(n)]
    else:
        itls = [x for o in ok for x in o.itl]
    total_output = sum(o.output_len for o in ok)
    print(f"completed {len(ok)} of {len(outputs)} in {duration:.3f} s; mean TTFT {mean(ttfts) * 1000:.3f} ms")
    result = {"duration": duration, "completed": len(ok), "total_input_tokens": 0, "total_output_tokens": total_output,
              "request_throughput": len(ok) / duration, "output_throughput": total_output / duration,
              "output_lens": [o.output_len if o.success else 0 for o in outputs]}
    e2e = "e2e_latency" if ARGS.output_file else "e2el"
    for name, xs in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), (e2e, e2es)):
        if not ARGS.output_file and name not in ARGS.percentile_metrics.split(","):
            continue  # vLLM writes only the figures --percentile-metrics names
        result[f"mean_{name}_ms"] = mean(xs) * 1000
        result[f"median_{name}_ms"] = percentile(xs, 50) * 1000
        result[f"std_{name}_ms"] = std(xs) * 1000
        result[f"p99_{name}_ms"] = percentile(xs, 99) * 1000
    if ARGS.output_file:
        result["backend"] = {"vllm": "vllm", "chat": "vllm-chat"}.get(ARGS.backend, ARGS.backend)
        result["request_rate"] = ARGS.request_rate  # json.dumps writes inf as Infinity
        result["accept_length"] = accept_length
        with open(ARGS.output_file, "a") as f:
            f.write(json.dumps(result) + "\n")
    if ARGS.save_result:
        result["failed"] = len(outputs) - len(ok)
        result["request_rate"] = ARGS.request_rate if ARGS.request_rate < float("inf") else "inf"
        with open(ARGS.save_result, "w") as f:
            json.dump(result, f)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
