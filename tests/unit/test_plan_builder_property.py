"""Random valid plans built with the Python builder are their JSON form, drawn side by side,
and check to the same digest as that form and as its JSON text (docs/design.md section 4),
sequential or parallel (`after`)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from effectusd import (
    CheckedPlan,
    Plan,
    check,
    compensate,
    fact,
    literal,
    no_compensation,
    result,
    step,
)
from effectusd.core.contracts import VerbContract
from effectusd.core.plan import FactType

PROPERTY_VERBS = {
    name: VerbContract(name=name, destination="d", path=f"/{name}") for name in ("a.do", "b.do")
}
PYTHON_TYPE = {
    FactType.STRING: str,
    FactType.INTEGER: int,
    FactType.NUMBER: float,
    FactType.BOOLEAN: bool,
    FactType.OBJECT: dict,
    FactType.ARRAY: list,
}
KEYS = st.text("abcxyz_$", min_size=1, max_size=4).filter(
    lambda key: key not in {"$fact", "$result", "$literal"}
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53) + 1, 2**53 - 1),
    st.floats(-1e6, 1e6, allow_nan=False),
    # U+0000 aside: no store keeps it, and check refuses it in either form (its own tests)
    st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=5),
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["$fact", "$result", "path", "k"]), inner, max_size=3)
    ),
    max_leaves=6,
)


def arg_pairs(facts: list[str], earlier: list[str]) -> st.SearchStrategy[tuple[Any, Any]]:
    """(what the builder is given, what the JSON form writes), drawn together."""
    leaves = [
        SCALARS.map(lambda value: (value, value)),
        JSON_VALUES.map(lambda value: (literal(value), {"$literal": value})),
    ]
    if facts:
        leaves.append(st.sampled_from(facts).map(lambda name: (fact(name), {"$fact": name})))
    if earlier:
        leaves.append(
            st.sampled_from(earlier).map(lambda target: (result(target), {"$result": target}))
        )
        leaves.append(
            st.tuples(st.sampled_from(earlier), st.sampled_from(["/id", "/a/0"])).map(
                lambda ref: (result(*ref), {"$result": ref[0], "path": ref[1]})
            )
        )

    def containers(inner: st.SearchStrategy[tuple[Any, Any]]) -> st.SearchStrategy[tuple[Any, Any]]:
        items = st.lists(inner, max_size=3)
        return st.one_of(
            items.map(lambda pairs: ([b for b, _ in pairs], [j for _, j in pairs])),
            items.map(lambda pairs: (tuple(b for b, _ in pairs), [j for _, j in pairs])),
            st.dictionaries(KEYS, inner, max_size=3).map(
                lambda pairs: (
                    {key: b for key, (b, _) in pairs.items()},
                    {key: j for key, (_, j) in pairs.items()},
                )
            ),
        )

    return st.recursive(st.one_of(leaves), containers, max_leaves=8)


def args_pair(facts: list[str], earlier: list[str]) -> st.SearchStrategy[tuple[Any, Any]]:
    return st.dictionaries(KEYS, arg_pairs(facts, earlier), max_size=3).map(
        lambda pairs: (
            {key: b for key, (b, _) in pairs.items()},
            {key: j for key, (_, j) in pairs.items()},
        )
    )


@st.composite
def plan_pairs(draw: st.DrawFn) -> tuple[Plan, dict[str, Any]]:
    facts = draw(
        st.dictionaries(
            st.sampled_from(["order", "amount", "tags", "meta"]), st.sampled_from(list(FactType))
        )
    )
    names = sorted(facts)
    built_steps, json_steps = [], []
    # Each step's transitive dependencies: the only steps whose results it may use.
    needs: dict[str, set[str]] = {}
    for index in range(draw(st.integers(1, 4))):
        step_id, verb = f"s{index}", draw(st.sampled_from(sorted(PROPERTY_VERBS)))
        before = [f"s{each}" for each in range(index)]
        after: list[str] | None = draw(
            st.none() | st.lists(st.sampled_from(before), unique=True) if before else st.none()
        )
        direct = before[-1:] if after is None else after
        needs[step_id] = set(direct).union(*(needs[each] for each in direct))
        earlier = sorted(needs[step_id])
        built_args, json_args = draw(args_pair(names, earlier))
        if draw(st.booleans()):
            undo = draw(st.sampled_from(sorted(PROPERTY_VERBS)))
            built_undo, json_undo = draw(args_pair(names, [*earlier, step_id]))
            built_comp: Any = compensate(undo, built_undo)
            json_comp: Any = {"verb": undo, "args": json_undo}
        else:
            built_comp, json_comp = no_compensation, "none"
        built_steps.append(step(step_id, verb, built_args, compensate=built_comp, after=after))
        json_step = {"id": step_id, "verb": verb, "args": json_args, "compensate": json_comp}
        json_steps.append(json_step if after is None else {**json_step, "after": after})
    plan = Plan(
        "random",
        facts={name: PYTHON_TYPE[kind] for name, kind in facts.items()},
        steps=built_steps,
    )
    as_json = {
        "plan_id": "random",
        "facts": {n: k.value for n, k in facts.items()},
        "steps": json_steps,
    }
    return plan, as_json


@settings(max_examples=60, deadline=None)
@given(plan_pairs())
def test_random_plans_built_in_python_are_their_json_form_with_the_same_digest(
    pair: tuple[Plan, dict[str, Any]],
) -> None:
    plan, as_json = pair
    from_text = json.loads(json.dumps(plan.to_json()))

    assert plan.to_json() == as_json
    built: CheckedPlan = plan.check(PROPERTY_VERBS)
    assert built.plan_digest == check(from_text, PROPERTY_VERBS).plan_digest
    assert built.plan_digest == check(as_json, PROPERTY_VERBS).plan_digest
