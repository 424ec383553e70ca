"""uid stability: encoding noise does not change a uid; content, domain do."""

from __future__ import annotations

import pytest

from curation.normalize import normalize_text, problem_uid
from curation.records import content_uid

BASE = "Find the remainder when $2^{100}$ is divided by 7."


@pytest.mark.parametrize(
    "variant",
    [
        "  Find the remainder when $2^{100}$ is divided by 7.\n",  # outer whitespace
        "Find  the\tremainder when $2^{100}$\nis divided by 7.",  # inner whitespace, newline
        "Find the remainder when $２^{１００}$ is divided by ７.",  # full-width digits (NFKC)
        "Find the\u00a0remainder when $2^{100}$ is divided by 7.",  # no-break space
        "Find the re\u200bmainder when $2^{100}$ is divided by 7.",  # zero-width space
        "\ufeffFind the remainder when $2^{100}$ is divided by 7.",  # BOM
    ],
)
def test_same_problem_in_other_bytes_has_the_same_uid(variant):
    assert variant != BASE
    assert problem_uid("math", variant) == problem_uid("math", BASE)


def test_nfkc_folds_ligatures_and_compatibility_forms():
    assert normalize_text("ﬁnd x² ") == "find x2"


@pytest.mark.parametrize(
    "other",
    [
        "Find the remainder when $2^{101}$ is divided by 7.",
        "find the remainder when $2^{100}$ is divided by 7.",  # case is content
        "Find the remainder when $2^{100}$ is divided by 7",  # punctuation is content
    ],
)
def test_different_content_has_a_different_uid(other):
    assert problem_uid("math", other) != problem_uid("math", BASE)


def test_uid_depends_on_domain_and_matches_content_uid():
    assert problem_uid("math", BASE) != problem_uid("code", BASE)
    assert problem_uid("code", BASE) == content_uid("code", normalize_text(BASE))
    assert problem_uid("math", BASE).startswith("p_") and len(problem_uid("math", BASE)) == 26
