"""A language model as a bandit player: a `Policy` that asks any OpenAI-compatible chat-completions endpoint which arm
to pull, so a model is measured on the same held-out tasks and regret as AD and DPT.

The prompt variants are those of the studies of whether language models explore in bandits (Krishnamurthy et al.
2024, "Can large language models explore in-context?"): the history written out pull by pull or summarised per arm;
with or without algorithm hints (each arm's UCB1 index written into the prompt); with k demonstration histories
(learning histories of a source algorithm from a learning-history dataset, played on other tasks).

- Answers are parsed strictly (`ARM: <index>`); a malformed or out-of-range answer is re-asked with a correction, at
  most `max_reasks` times, after which the arm is drawn uniformly from a seeded generator and the pull is counted as
  a fallback (so a flaky model costs regret, never a crashed run).
- Every response is cached by the sha256 of the full request (model, messages, temperature, max tokens) and its
  place in the evaluation (task row, pull, attempt) in an append-only JSON-lines file, so an interrupted run resumes,
  and a finished one is re-scored, without new calls. The place is part of the key because two tasks often send the
  same prompt (every first pull does): each must get its own sample, as it would uncached at temperature > 0.
- The API key is read from the environment variable the config names and is never written anywhere.
- Rate limits (429) and server errors (5xx) are retried after the server's `Retry-After` (else a doubling backoff),
  at most `max_retries` times; then one error line names the endpoint and the last status.

The HTTP client is the standard library's (urllib): one POST per question, no SDK and its import cost for a feature
most users never call.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from offbench.errors import OffbenchError
from offbench.records import ranged

ANSWER = re.compile(r"^\s*ARM:\s*(\d+)\s*\.?\s*$", re.IGNORECASE | re.MULTILINE)
MAX_RETRY_AFTER_S = 120.0  # a server asking for longer than this is treated as down


@dataclass
class LLMConfig:
    """How the model is asked. Defaults are the plainest prompt: raw history, no hints, no demonstrations."""

    endpoint: str = ranged("http://127.0.0.1:8000/v1", doc="base URL of an OpenAI-compatible API (…/v1)")
    model: str = ranged("", doc="model name sent with every request")
    api_key_env: str = ranged("OPENAI_API_KEY", doc="environment variable holding the API key (never recorded)")
    temperature: float = ranged(0.0, ge=0.0, le=2.0)
    max_tokens: int = ranged(16, ge=1, doc="answer length limit: the answer is one line")
    history: Literal["raw", "summary"] = ranged("raw", doc="each pull written out, or counts and mean reward per arm")
    hints: bool = ranged(False, doc="write each arm's UCB1 index into the prompt (algorithm-guided hints)")
    demonstrations: int = ranged(0, ge=0, le=16, doc="learning histories of a source algorithm shown as examples")
    demonstration_dataset: str = ranged("", doc="the learning-history dataset the demonstrations come from")
    max_reasks: int = ranged(2, ge=0, le=10, doc="corrections asked for after a malformed answer")
    max_retries: int = ranged(5, ge=0, le=20, doc="retries of a rate-limited or failed request")
    timeout_s: float = ranged(60.0, gt=0.0)
    concurrency: int = ranged(8, ge=1, le=64, doc="requests in flight at once (one per bandit task)")
    seed: int = ranged(0, ge=0, doc="seed of the fallback arm draws")


@dataclass
class CallRecord:
    """One pull's cost: what `LLMBanditPolicy.calls` keeps per row and step, and the usage file holds."""

    row: int
    step: int
    arm: int
    prompt_tokens: int = 0
    completion_tokens: int = 0
    requests: int = 0  # sent to the endpoint (cached answers are free)
    reasks: int = 0
    fallback: bool = False


class ChatEndpoint:
    """POSTs chat-completions requests, with retries that honour Retry-After, and a response cache."""

    def __init__(self, config: LLMConfig, cache_path: Path | None):
        self.config = config
        self.url = config.endpoint.rstrip("/") + "/chat/completions"
        self._key = os.environ.get(config.api_key_env, "")
        self.cache = ResponseCache(cache_path)

    def ask(self, messages: list[dict[str, str]], place: str) -> tuple[str, dict[str, int], bool]:
        """(answer text, token usage, whether it came from the cache); `place` names where in the evaluation it is asked."""
        request = {
            "model": self.config.model,
            "messages": messages,
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
        }
        key = hashlib.sha256(json.dumps({"request": request, "place": place}, sort_keys=True).encode()).hexdigest()
        cached = self.cache.get(key)
        if cached is not None:
            return cached["text"], cached["usage"], True
        body = self._post(request)
        try:
            text = str(body["choices"][0]["message"]["content"] or "")
        except (KeyError, IndexError, TypeError):
            raise OffbenchError(f"{self.url}: the response is not a chat completion (no choices[0].message.content)") from None
        usage = {name: int((body.get("usage") or {}).get(name, 0)) for name in ("prompt_tokens", "completion_tokens")}
        self.cache.put(key, {"text": text, "usage": usage})
        return text, usage, False

    def _post(self, request: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(request).encode()
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {self._key}"} if self._key else {})}
        last = ""
        for attempt in range(self.config.max_retries + 1):
            wait = min(2.0**attempt, 30.0)
            try:
                with urllib.request.urlopen(
                    urllib.request.Request(self.url, data=data, headers=headers), timeout=self.config.timeout_s
                ) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}"
                if exc.code != 429 and exc.code < 500:
                    raise OffbenchError(f"{self.url}: {last} ({_reason(exc)})") from None
                wait = _retry_after(exc.headers.get("Retry-After"), wait)
            except (TimeoutError, urllib.error.URLError, ConnectionError) as exc:
                last = f"no answer ({getattr(exc, 'reason', exc)})"
            except json.JSONDecodeError:
                last = "a response that is not JSON"
            if attempt < self.config.max_retries:
                time.sleep(wait)
        raise OffbenchError(f"{self.url}: gave up after {self.config.max_retries + 1} tries, last: {last}")


def _reason(exc: urllib.error.HTTPError) -> str:
    try:
        return exc.read(300).decode("utf-8", "replace").strip().replace("\n", " ") or exc.reason
    except OSError:
        return str(exc.reason)


def _retry_after(header: str | None, fallback: float) -> float:
    """Seconds a 429 / 503 asks us to wait (the header's delay-seconds form); longer than MAX_RETRY_AFTER_S is an
    error, not a wait."""
    if header is None:
        return fallback
    try:
        seconds = float(header)
    except ValueError:
        return fallback
    if not math.isfinite(seconds) or seconds > MAX_RETRY_AFTER_S:
        raise OffbenchError(f"the endpoint asks to wait {header} s before retrying (more than {MAX_RETRY_AFTER_S:.0f} s)")
    return max(seconds, 0.0)


class ResponseCache:
    """Answers by request digest, in an append-only JSON-lines file: a torn last line (a killed run) is skipped."""

    def __init__(self, path: Path | None):
        self.path, self._lock, self._answers = path, threading.Lock(), {}
        if path is not None and path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    entry = json.loads(line)
                    self._answers[entry["key"]] = entry["answer"]
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue

    def get(self, key: str) -> dict[str, Any] | None:
        return self._answers.get(key)

    def put(self, key: str, answer: dict[str, Any]) -> None:
        with self._lock:
            self._answers[key] = answer
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with open(self.path, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps({"key": key, "answer": answer}) + "\n")
                    handle.flush()
                    os.fsync(handle.fileno())


@dataclass
class BanditHistory:
    """One row's pulls so far, and the per-arm statistics the summary and the hints are written from."""

    num_arms: int
    arms: list[int] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)

    def add(self, arm: int, reward: float) -> None:
        self.arms.append(arm)
        self.rewards.append(float(reward))

    def counts_and_means(self) -> tuple[np.ndarray, np.ndarray]:
        counts = np.bincount(self.arms, minlength=self.num_arms).astype(float)
        sums = np.bincount(self.arms, weights=self.rewards, minlength=self.num_arms)
        return counts, np.divide(sums, counts, out=np.zeros(self.num_arms), where=counts > 0)

    def ucb_indices(self) -> np.ndarray:
        """UCB1's index mean + sqrt(2 ln t / n) per arm (Auer et al. 2002), infinite for an arm never pulled."""
        counts, means = self.counts_and_means()
        total = max(len(self.arms), 1)
        bonus = np.sqrt(2.0 * math.log(total) / np.maximum(counts, 1))
        return np.where(counts > 0, means + bonus, np.inf)

    def describe(self, style: str) -> str:
        if not self.arms:
            return "No arm has been pulled yet."
        if style == "raw":
            return "\n".join(f"pull {t + 1}: arm {a}, reward {r:g}" for t, (a, r) in enumerate(zip(self.arms, self.rewards, strict=True)))
        counts, means = self.counts_and_means()
        return "\n".join(
            f"arm {a}: pulled {int(n)} times, mean reward {m:.3f}" if n else f"arm {a}: never pulled"
            for a, (n, m) in enumerate(zip(counts, means, strict=True))
        )


def build_prompt(history: BanditHistory, config: LLMConfig, demonstrations: list[BanditHistory]) -> list[dict[str, str]]:
    """The chat messages for the next pull of one task."""
    arms = history.num_arms
    system = (
        f"You are playing a multi-armed bandit with {arms} arms, numbered 0 to {arms - 1}. Each pull of an arm "
        "gives a random reward; arms differ in their mean reward, which you do not know. Your goal is the largest "
        "total reward over all pulls. Reply with one line of the form ARM: <number> and nothing else."
    )
    parts = []
    for i, example in enumerate(demonstrations, 1):
        parts.append(f"Example {i}: how an experienced player played another bandit of this kind:\n{example.describe(config.history)}")
    parts.append(f"Your pulls so far ({len(history.arms)}):\n{history.describe(config.history)}")
    if config.hints:
        indices = history.ucb_indices()
        parts.append(
            "Hint, each arm's UCB index (mean reward plus exploration bonus; the largest is the UCB choice):\n"
            + "\n".join(f"arm {a}: {'not pulled yet' if math.isinf(u) else f'{u:.3f}'}" for a, u in enumerate(indices))
        )
    parts.append("Which arm do you pull next?")
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


def parse_arm(text: str, num_arms: int) -> int | None:
    """The arm a strict answer names (`ARM: 3`), or None for anything else (out of range, prose, two answers)."""
    found = ANSWER.findall(text)
    if len(found) != 1:
        return None
    arm = int(found[0])
    return arm if 0 <= arm < num_arms else None


class LLMBanditPolicy:
    """A `Policy` over a batch of bandit tasks (one pull per episode, as offbench's bandit cards play them): each row's
    history is its own conversation state, and each step asks the endpoint once per row, `concurrency` at a time."""

    def __init__(self, config: LLMConfig, num_arms: int, cache_path: Path | None = None, demonstrations: Sequence[BanditHistory] = ()):
        if num_arms < 2:
            raise OffbenchError(f"an LLM bandit player needs at least two arms, got {num_arms}")
        self.config, self.num_arms = config, num_arms
        self.endpoint = ChatEndpoint(config, cache_path)
        self.demonstrations = list(demonstrations)
        self.calls: list[CallRecord] = []
        self._rng = np.random.default_rng(config.seed)
        self._histories: list[BanditHistory] = []
        self._last: np.ndarray = np.zeros(0, dtype=np.int64)

    def reset(self, num_envs: int) -> None:
        self._histories = [BanditHistory(self.num_arms) for _ in range(num_envs)]
        self.calls = []

    def act(self, observations: np.ndarray) -> np.ndarray:
        rows = range(len(self._histories))
        fallbacks = self._rng.integers(0, self.num_arms, size=len(self._histories))  # drawn every step: reproducible
        with ThreadPoolExecutor(self.config.concurrency) as pool:
            records = list(pool.map(lambda row: self._choose(row, int(fallbacks[row])), rows))
        self.calls.extend(records)
        self._last = np.array([record.arm for record in records], dtype=np.int64)
        return self._last

    def _choose(self, row: int, fallback: int) -> CallRecord:
        history = self._histories[row]
        record = CallRecord(row=row, step=len(history.arms), arm=fallback)
        messages = build_prompt(history, self.config, self.demonstrations)
        for attempt in range(self.config.max_reasks + 1):
            text, usage, cached = self.endpoint.ask(messages, place=f"row {row}, pull {record.step}, attempt {attempt}")
            record.requests += not cached
            record.prompt_tokens += usage["prompt_tokens"]
            record.completion_tokens += usage["completion_tokens"]
            arm = parse_arm(text, self.num_arms)
            if arm is not None:
                record.arm = arm
                return record
            if attempt < self.config.max_reasks:
                record.reasks += 1
                messages = [
                    *messages,
                    {"role": "assistant", "content": text},
                    {"role": "user", "content": f"Reply with exactly one line, ARM: <number from 0 to {self.num_arms - 1}>."},
                ]
        record.fallback = True
        return record

    def observe(self, rewards: np.ndarray, dones: np.ndarray) -> None:
        for history, arm, reward in zip(self._histories, self._last, rewards, strict=True):
            history.add(int(arm), float(reward))

    def usage(self) -> dict[str, float | list[float]]:
        """Totals over every pull since `reset`, and the tokens of each episode (pull) averaged over the tasks: what
        the in-context protocol records beside the returns (evaluations.jsonl `policy_usage`)."""
        steps = 1 + max((c.step for c in self.calls), default=-1)
        per_episode = np.zeros(steps)
        np.add.at(per_episode, [c.step for c in self.calls], [c.prompt_tokens + c.completion_tokens for c in self.calls])
        return {
            "pulls": len(self.calls),
            "requests": sum(c.requests for c in self.calls),
            "prompt_tokens": sum(c.prompt_tokens for c in self.calls),
            "completion_tokens": sum(c.completion_tokens for c in self.calls),
            "reasks": sum(c.reasks for c in self.calls),
            "fallbacks": sum(c.fallback for c in self.calls),
            "tokens_per_episode": (per_episode / max(len(self._histories), 1)).tolist(),
        }


def demonstration_histories(store: Any, count: int, num_arms: int, seed: int) -> list[BanditHistory]:
    """`count` whole learning histories (a source algorithm's pulls on one training task each, by `history_id`) from a
    bandit learning-history dataset, chosen with `seed`."""
    if count == 0:
        return []
    history_ids = store.columns.get("history_id")
    if history_ids is None:
        raise OffbenchError(
            f"{store.card.get('id', store.path)}: not a learning-history dataset (no history_id column) to take demonstrations from"
        )
    actions = np.asarray(store.actions).reshape(-1)
    if actions.size and (actions.min() < 0 or actions.max() >= num_arms):
        raise OffbenchError(f"{store.card.get('id', store.path)}: its histories pull arms outside 0..{num_arms - 1}")
    ids = np.unique(history_ids)
    chosen = np.sort(np.random.default_rng(seed).choice(ids, size=min(count, len(ids)), replace=False))
    rewards = np.asarray(store.rewards)
    out = []
    for history_id in chosen:
        steps = np.flatnonzero(history_ids == history_id)
        out.append(BanditHistory(num_arms, actions[steps].astype(int).tolist(), rewards[steps].astype(float).tolist()))
    return out
