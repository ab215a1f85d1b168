"""Hypothesis strategy for arbitrary JSON documents, shared by the adapter tests."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


def json_values(
    numbers: st.SearchStrategy[Any], *, text_size: int, container_size: int, key_size: int, max_leaves: int
) -> st.SearchStrategy[Any]:
    """Nested JSON values: null, booleans, big integers, ``numbers``, strings, lists and objects."""
    return st.recursive(
        st.none()
        | st.booleans()
        | st.integers(min_value=-(10**30), max_value=10**30)
        | numbers
        | st.text(max_size=text_size),
        lambda children: (
            st.lists(children, max_size=container_size)
            | st.dictionaries(st.text(max_size=key_size), children, max_size=container_size)
        ),
        max_leaves=max_leaves,
    )
