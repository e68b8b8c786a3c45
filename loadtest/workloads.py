"""Deterministic shared-prefix workloads, at the token level.

A workload is a list of :class:`WorkItem` (arrival time, chat segments of token ids, output
length, session). Token ids here are indices into a word vocabulary: the simulator uses
them as they are, and the live runner turns each into one whole-word token of the fleet's
tokenizer (" word"), so a chat's text tokenizes back to the same structure and prefixes
are preserved exactly.

    multiturn  assistants with long system prompts (Zipf popularity); conversations of
               several turns re-sending the whole history, with think time between turns
    agent      a shared context forked into k branches that continue independently
               (tool results appended step by step)
    rag        popular documents (Zipf) shared by many questions
    random     nothing shared: the control
    hotprefix  a share of all traffic carries one system prompt, the rest is unique
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

VOCAB = 4096
"""Word-vocabulary size used for token ids."""


Segments = tuple[tuple[str, np.ndarray], ...]


@dataclass(frozen=True, slots=True)
class WorkItem:
    at: float
    """Arrival time in seconds from the start."""
    content: Segments | Callable[[], Segments]
    """(role, token ids) per chat message (ids uint32 in [0, VOCAB)), or a function that
    builds them on demand (trace replays: a whole trace would not fit in memory)."""
    output_tokens: int
    session: str | None = None
    prompt_tokens: int = -1

    def segments(self) -> Segments:
        return self.content() if callable(self.content) else self.content

    def token_ids(self) -> np.ndarray:
        parts = [ids for _, ids in self.segments()]
        return np.concatenate(parts) if parts else np.zeros(0, np.uint32)

    def with_time(self, at: float) -> WorkItem:
        return WorkItem(at, self.content, self.output_tokens, self.session, self.prompt_tokens)


def item(at: float, segments: Segments, output_tokens: int, session: str | None) -> WorkItem:
    return WorkItem(at, segments, output_tokens, session, sum(len(i) for _, i in segments))


def tokens(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, VOCAB, n, dtype=np.uint32)


def _zipf_weights(n: int, s: float) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1) ** s
    return w / w.sum()


def _poisson(rng: np.random.Generator, rate: float, count: int) -> np.ndarray:
    return np.cumsum(rng.exponential(1.0 / rate, count))


def multiturn(seed: int = 0, requests: int = 2000, rate: float = 4.0, tenants: int = 20,
              system_tokens: int = 2000, zipf: float = 1.1, turns: tuple[int, int] = (2, 8),
              user_tokens: tuple[int, int] = (50, 400), reply_tokens: tuple[int, int] = (50, 400),
              think_s: float = 20.0) -> list[WorkItem]:
    rng = np.random.default_rng(seed)
    systems = [tokens(rng, system_tokens) for _ in range(tenants)]
    weights = _zipf_weights(tenants, zipf)
    items: list[WorkItem] = []
    starts = _poisson(rng, rate / np.mean(turns), requests)
    for conversation, start in enumerate(starts):
        if len(items) >= requests:
            break
        tenant = int(rng.choice(tenants, p=weights))
        history: list[tuple[str, np.ndarray]] = [("system", systems[tenant])]
        at = float(start)
        for _ in range(int(rng.integers(turns[0], turns[1] + 1))):
            history.append(("user", tokens(rng, int(rng.integers(*user_tokens)))))
            reply = int(rng.integers(*reply_tokens))
            items.append(item(at, tuple(history), reply, f"c{conversation}"))
            history.append(("assistant", tokens(rng, reply)))
            at += float(rng.exponential(think_s))
    items.sort(key=lambda w: w.at)
    return items[:requests]


def agent(seed: int = 0, requests: int = 2000, rate: float = 4.0, context_tokens: int = 4000,
          branches: int = 8, steps: int = 4, tool_tokens: tuple[int, int] = (100, 600),
          output: tuple[int, int] = (50, 200), step_s: float = 5.0) -> list[WorkItem]:
    rng = np.random.default_rng(seed)
    items: list[WorkItem] = []
    for task, start in enumerate(_poisson(rng, rate / (branches * steps), requests)):
        if len(items) >= requests:
            break
        context = [("system", tokens(rng, 500)), ("user", tokens(rng, context_tokens))]
        for branch in range(branches):
            history = list(context)
            at = float(start) + float(rng.exponential(0.5))
            for _ in range(steps):
                out = int(rng.integers(*output))
                items.append(item(at, tuple(history), out, f"t{task}b{branch}"))
                history.append(("assistant", tokens(rng, out)))
                history.append(("tool", tokens(rng, int(rng.integers(*tool_tokens)))))
                at += float(rng.exponential(step_s))
    items.sort(key=lambda w: w.at)
    return items[:requests]


def rag(seed: int = 0, requests: int = 2000, rate: float = 4.0, documents: int = 200,
        document_tokens: int = 3000, zipf: float = 1.0,
        question_tokens: tuple[int, int] = (20, 100), output: tuple[int, int] = (50, 300),
        ) -> list[WorkItem]:
    rng = np.random.default_rng(seed)
    system = tokens(rng, 300)
    docs = [tokens(rng, document_tokens) for _ in range(documents)]
    weights = _zipf_weights(documents, zipf)
    items = []
    for i, at in enumerate(_poisson(rng, rate, requests)):
        doc = int(rng.choice(documents, p=weights))
        segments = (("system", system), ("user", np.concatenate(
            [docs[doc], tokens(rng, int(rng.integers(*question_tokens)))])))
        items.append(item(float(at), segments, int(rng.integers(*output)), f"q{i}"))
    return items


def random_prompts(seed: int = 0, requests: int = 2000, rate: float = 4.0,
                   prompt: tuple[int, int] = (500, 4000), output: tuple[int, int] = (50, 300)
                   ) -> list[WorkItem]:
    rng = np.random.default_rng(seed)
    return [item(float(at), (("user", tokens(rng, int(rng.integers(*prompt)))),),
                 int(rng.integers(*output)), f"r{i}")
            for i, at in enumerate(_poisson(rng, rate, requests))]


def hot_prefix(seed: int = 0, requests: int = 2000, rate: float = 4.0, share: float = 0.3,
               system_tokens: int = 4000, prompt: tuple[int, int] = (500, 3000),
               output: tuple[int, int] = (50, 300)) -> list[WorkItem]:
    rng = np.random.default_rng(seed)
    system = tokens(rng, system_tokens)
    items = []
    for i, at in enumerate(_poisson(rng, rate, requests)):
        user = ("user", tokens(rng, int(rng.integers(*prompt))))
        segments = (("system", system), user) if rng.random() < share else (user,)
        items.append(item(float(at), segments, int(rng.integers(*output)), f"h{i}"))
    return items


WORKLOADS: dict[str, Callable[..., list[WorkItem]]] = {
    "multiturn": multiturn,
    "agent": agent,
    "rag": rag,
    "random": random_prompts,
    "hotprefix": hot_prefix,
}

