"""Workload generators: deterministic for a seed, with the prefix structure they promise."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from loadtest.workloads import WORKLOADS, agent, multiturn, rag


def fingerprint(items: list) -> list:
    return [(round(it.at, 9), it.prompt_tokens, it.output_tokens, it.session,
             it.token_ids()[:8].tolist()) for it in items]


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_same_seed_same_workload_other_seed_other_workload(name: str) -> None:
    make = WORKLOADS[name]
    a, b, c = make(seed=1, requests=200), make(seed=1, requests=200), make(seed=2, requests=200)
    assert fingerprint(a) == fingerprint(b)
    assert fingerprint(a) != fingerprint(c)
    assert len(a) == 200
    assert all(x.at <= y.at for x, y in itertools.pairwise(a))
    assert all(it.prompt_tokens == len(it.token_ids()) > 0 for it in a)


def test_multiturn_turns_resend_the_whole_history() -> None:
    items = multiturn(seed=3, requests=400)
    by_session: dict[str, list] = {}
    for it in items:
        by_session.setdefault(it.session, []).append(it)
    checked = 0
    for turns in by_session.values():
        for prev, nxt in itertools.pairwise(turns):
            p, n = prev.token_ids(), nxt.token_ids()
            assert len(n) > len(p) and np.array_equal(n[: len(p)], p)
            checked += 1
    assert checked > 50
    systems = {it.segments()[0][1].tobytes() for it in items}
    assert len(systems) <= 20  # shared system prompts (tenants)


def test_agent_branches_share_their_task_context() -> None:
    items = agent(seed=0, requests=300, branches=4)
    firsts: dict[str, list] = {}
    for it in items:
        firsts.setdefault(it.session.split("b")[0], []).append(it.token_ids()[:4000])
    shared = [v for v in firsts.values() if len(v) > 1]
    assert shared and all(np.array_equal(v[0], w) for v in shared for w in v)


def test_rag_questions_share_popular_documents() -> None:
    items = rag(seed=0, requests=500, documents=50)
    heads = [it.segments()[1][1][:3000].tobytes() for it in items]
    assert len(set(heads)) < 50 < len(heads)
